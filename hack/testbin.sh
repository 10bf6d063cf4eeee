#!/usr/bin/env bash
# Builds the kube-apiserver and etcd binaries that e2e/envtest runs (and kubeadm, for the
# lifecycle lab's real control planes), from the
# Go modules pinned in e2e/testbin, into a versioned cache directory. We build
# from source (instead of downloading envtest tarballs) because the only
# network access guaranteed in CI and dev sandboxes is the Go module proxy.
#
# Idempotent: each binary is built only when missing; a build goes to a
# temporary name in the target directory and is renamed into place, so an
# interrupted or concurrent run never leaves a truncated binary behind.
#
# Prints the binary directory as the last line of stdout (build logs go to
# stderr), so callers can do: dir=$(hack/testbin.sh | tail -n1).
#
# Usage: hack/testbin.sh [--print-dir]
#   --print-dir  print the directory without building (used by mk/testbin.mk)
#
# Environment: CAPLB_CACHE (default $HOME/.cache/caplb) is the cache root.
set -euo pipefail

# Keep in sync with e2e/testbin/go.mod and the K8sVersion/EtcdVersion
# constants in e2e/envtest; TestVersionsInSync checks all three.
K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.14

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module_dir="${repo_root}/e2e/testbin"
cache_root="${CAPLB_CACHE:-${HOME}/.cache/caplb}"
bin_dir="${cache_root}/testbin/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"

log() { echo "testbin: $*" >&2; }

# kube-vip, the system caplb takes a VIP over from (e2e/lifecycle's takeover lab): built from its
# own module at these versions (its go.mod pins its dependencies), the
# v0.x line CAPV's templates ship and the newest v1.x the module proxy served on 2026-11-29.
# Keep in sync with KubeVIPOldVersion and KubeVIPNewVersion in e2e/envtest (TestVersionsInSync).
KUBE_VIP_VERSIONS=(v0.9.1 v1.2.2)

# steps is how many binaries main builds; step counts them as build goes.
steps=$((4 + ${#KUBE_VIP_VERSIONS[@]}))
step=0

# heartbeat NAME MINUTES: a line a minute while NAME builds, so a cold build (nothing on screen
# but the compiler's silence) says it is alive and how far along the estimate it is.
heartbeat() {
	local name=$1 estimate=$2 start=${SECONDS}
	while sleep 60 >/dev/null 2>&1; do
		log "[${step}/${steps}] still building ${name}: $(((SECONDS - start) / 60)) min of about ${estimate}"
	done
}

# build NAME PACKAGE MINUTES LDFLAGS (MINUTES: a cold build's time on 2 cores, module downloads
# included)
build() {
	local name=$1 pkg=$2 estimate=$3 ldflags=$4
	local target="${bin_dir}/${name}"
	step=$((step + 1))
	if [[ -x "${target}" ]]; then
		log "[${step}/${steps}] ${name} present in ${bin_dir}"
		return
	fi
	local tmp="${bin_dir}/.${name}.tmp.$$"
	log "[${step}/${steps}] building ${name} from ${pkg} (cold: about ${estimate} min on 2 cores; built once, then cached in ${bin_dir})"
	heartbeat "${name}" "${estimate}" 9>&- &
	local beat=$!
	# shellcheck disable=SC2064 # expand now: the trap must remove this tmp and stop this heartbeat.
	trap "rm -f '${tmp}'; kill ${beat} 2>/dev/null" EXIT
	local start=${SECONDS}
	(
		cd "${module_dir}"
		# GOWORK=off: a go.work in the checkout must not change this module's
		# pins. -buildvcs=false: the binary should not be stamped with
		# caplb's git state. -mod=readonly: go.mod/go.sum are committed.
		GOWORK=off CGO_ENABLED=0 go build -mod=readonly -trimpath -buildvcs=false \
			-ldflags "-s -w ${ldflags}" -o "${tmp}" "${pkg}"
	)
	kill "${beat}" 2>/dev/null || true
	mv -f "${tmp}" "${target}"
	trap - EXIT
	log "[${step}/${steps}] built ${name} in $((SECONDS - start))s"
}

# build_module_main NAME MODULE@VERSION MINUTES: as build, for a module whose root is a main
# package, built with that module's own go.mod and go.sum (not e2e/testbin's).
build_module_main() {
	local name=$1 pkg=$2 estimate=$3
	local target="${bin_dir}/${name}"
	step=$((step + 1))
	if [[ -x "${target}" ]]; then
		log "[${step}/${steps}] ${name} present in ${bin_dir}"
		return
	fi
	local tmpdir="${bin_dir}/.${name}.tmp.$$"
	log "[${step}/${steps}] building ${name} from ${pkg} (cold: about ${estimate} min on 2 cores; built once, then cached in ${bin_dir})"
	heartbeat "${name}" "${estimate}" 9>&- &
	local beat=$!
	# shellcheck disable=SC2064 # expand now: the trap must remove this tmp and stop this heartbeat.
	trap "rm -rf '${tmpdir}'; kill ${beat} 2>/dev/null" EXIT
	local start=${SECONDS}
	mkdir -p "${tmpdir}"
	(
		# The module as its release zip has it (go.mod and go.sum), built as the main module in
		# the read-only module cache: `go install pkg@version` would also ask the proxy for the
		# module's version list (deprecations), which the proxy here refuses.
		export GOWORK=off GOFLAGS= CGO_ENABLED=0
		local src
		src=$(cd "${tmpdir}" && go mod download -json "${pkg}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[[ -n "${src}" ]] || { log "go mod download ${pkg}: no directory"; exit 1; }
		cd "${src}"
		go build -mod=readonly -trimpath -buildvcs=false -ldflags "-s -w" -o "${tmpdir}/out" .
	)
	kill "${beat}" 2>/dev/null || true
	mv -f "${tmpdir}/out" "${target}"
	rm -rf "${tmpdir}"
	trap - EXIT
	log "[${step}/${steps}] built ${name} in $((SECONDS - start))s"
}

# main is a function so bash parses the whole file before running: editing
# the script while a long build runs must not corrupt the running instance.
main() {
	case "${1:-}" in
	"") ;;
	--print-dir)
		echo "${bin_dir}"
		return 0
		;;
	*)
		echo "usage: $0 [--print-dir]" >&2
		return 2
		;;
	esac

	mkdir -p "${bin_dir}"

	# Serialise concurrent invocations (e.g. parallel make jobs) so the
	# machine does not compile kube-apiserver twice; the rename keeps things
	# safe even where flock is unavailable.
	if command -v flock >/dev/null 2>&1; then
		exec 9>"${bin_dir}/.lock"
		flock 9
		# Holding the lock, any temp file is a leftover of a killed run.
		rm -rf "${bin_dir}"/.*.tmp.*
	fi

	# These are what `kube-apiserver --version` and /version report; without
	# them the server claims v0.0.0-master, which breaks clients that gate
	# behaviour on the server version. Mirrors upstream hack/lib/version.sh,
	# minus the git commit, which a module zip does not carry.
	local k8s_minor=${K8S_VERSION#v1.}
	k8s_minor=${k8s_minor%%.*}
	local k8s_ldflags="" pkg
	for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		k8s_ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION}"
		k8s_ldflags+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${k8s_minor}"
		k8s_ldflags+=" -X ${pkg}.gitTreeState=clean"
	done

	# The estimates: a cold `make demo` here spent about 18 of its 27.5 minutes on these three
	# (issue 35); kube-apiserver is most of it, kubeadm reuses much of its compiled code.
	build etcd go.etcd.io/etcd/server/v3 4 ""
	build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver 10 "${k8s_ldflags}"
	# kubeadm writes the lifecycle lab's real control planes (e2e/lab/kubeadm): its own PKI,
	# kubeconfigs and static-pod manifests.
	build kubeadm k8s.io/kubernetes/cmd/kubeadm 4 "${k8s_ldflags}"
	# kube-controller-manager's bootstrap signer re-signs kube-public/cluster-info for every
	# bootstrap token (the endpoint-move lab: kubeadm join's discovery verifies that signature).
	build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager 5 "${k8s_ldflags}"
	local v
	for v in "${KUBE_VIP_VERSIONS[@]}"; do
		build_module_main "kube-vip-${v}" "github.com/kube-vip/kube-vip@${v}" 3
	done

	echo "${bin_dir}"
}

main "$@"
