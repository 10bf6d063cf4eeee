//go:build linux

// Command podrun is the lab's kubelet for one static pod: it reads a pod manifest from a lab
// node's root directory (where the node's bootstrap wrote it), builds the container's view —
// a read-only root holding only the image's binary, plus each hostPath volume (or its subPath)
// bound from the node's root at its mountPath, read-only where the manifest says so — sets the
// node's hostname, keeps only the capabilities the container asks for, and execs the container's
// command. So the lab runs the agent exactly as the rendered manifest describes it, and a
// manifest that forgets a volume or a capability fails in the lab as on a real node.
//
// It must start in fresh mount and UTS namespaces, inside the node's network namespace:
//
//	ip netns exec <node> unshare --mount --uts --propagation private podrun -root ... -manifest ...
//
// Only host-network pods with one container are supported: the agent's shape, kubeadm's etcd
// and kube-apiserver (e2e/lab/kubeadm), and kube-vip's (no command: -entrypoint gives its
// image's; hostAliases become the container's /etc/hosts, as the kubelet writes it).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

type images map[string]string

func (i images) String() string { return fmt.Sprint(map[string]string(i)) }
func (i images) Set(v string) error {
	img, bin, ok := strings.Cut(v, "=")
	if !ok || img == "" || bin == "" {
		return fmt.Errorf("-image %q: want <image>=<binary on the host>", v)
	}
	i[img] = bin
	return nil
}

func main() {
	root := flag.String("root", "", "the node's root directory (its \"/\")")
	rootfs := flag.String("rootfs", "", "an empty directory to build the container's root in")
	manifest := flag.String("manifest", "", "the static pod manifest's path on the node (e.g. /etc/kubernetes/manifests/caplb-agent.yaml)")
	hostname := flag.String("hostname", "", "the node's hostname (its kubelet's node name)")
	imgs := images{}
	flag.Var(imgs, "image", "<image>=<binary>: the image's entrypoint binary on the host (repeatable; any image when <image> is *)")
	entrypoint := flag.String("entrypoint", "", "the image's ENTRYPOINT, run when the container has no command (kube-vip's manifests give only args)")
	flag.Parse()
	if err := run(*root, *rootfs, *manifest, *hostname, *entrypoint, imgs); err != nil {
		fmt.Fprintln(os.Stderr, "podrun:", err)
		os.Exit(1)
	}
}

func run(root, rootfs, manifest, hostname, entrypoint string, imgs images) error {
	if root == "" || rootfs == "" || manifest == "" || hostname == "" {
		return errors.New("-root, -rootfs, -manifest and -hostname are required")
	}
	pod, err := readPod(filepath.Join(root, manifest))
	if err != nil {
		return err
	}
	c := pod.Spec.Containers[0]
	bin := imgs[c.Image]
	if bin == "" {
		bin = imgs["*"]
	}
	if bin == "" {
		return fmt.Errorf("no binary for image %q (give -image %s=<binary>)", c.Image, c.Image)
	}
	if len(c.Command) == 0 {
		if entrypoint == "" {
			return fmt.Errorf("container %s: no command, and no -entrypoint for its image", c.Name)
		}
		// As a runtime: the image's ENTRYPOINT, the container's args after it.
		c.Command = []string{entrypoint}
	}
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		return fmt.Errorf("sethostname (start podrun with unshare --uts): %w", err)
	}
	// Nothing mounted here may leak back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private (start podrun with unshare --mount): %w", err)
	}
	if err := unix.Mount("tmpfs", rootfs, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("container root: %w", err)
	}
	// The image: its one binary, where the command finds it on PATH.
	entry := filepath.Join("/usr/local/bin", filepath.Base(c.Command[0]))
	if err := bind(bin, filepath.Join(rootfs, entry), true, false); err != nil {
		return err
	}
	// What a container runtime always provides.
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		if err := bind(d, filepath.Join(rootfs, d), false, true); err != nil {
			return err
		}
	}
	// The kubelet writes a host-network pod's /etc/hosts: the node's own names and the pod's
	// hostAliases (kube-vip's manifests alias "kubernetes" to 127.0.0.1 to reach the local API
	// server before any VIP exists).
	if len(pod.Spec.HostAliases) > 0 {
		if err := writeHosts(filepath.Join(rootfs, "etc", "hosts"), hostname, pod.Spec.HostAliases); err != nil {
			return err
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok || v.HostPath == nil {
			return fmt.Errorf("volumeMount %s: no hostPath volume of that name", m.Name)
		}
		src := filepath.Join(root, v.HostPath.Path)
		if err := checkHostPath(src, v.HostPath); err != nil {
			return fmt.Errorf("volume %s (%s): %w", m.Name, v.HostPath.Path, err)
		}
		if m.SubPath != "" {
			// As the kubelet: a relative path inside the volume, never out of it.
			if !filepath.IsLocal(m.SubPath) {
				return fmt.Errorf("volumeMount %s: subPath %q must be a relative path inside the volume", m.Name, m.SubPath)
			}
			src = filepath.Join(src, m.SubPath)
		}
		if err := bind(src, filepath.Join(rootfs, m.MountPath), m.ReadOnly, false); err != nil {
			return err
		}
	}
	sc := c.SecurityContext
	if sc != nil && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		if err := unix.Mount("", rootfs, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only container root: %w", err)
		}
	}
	if err := unix.Chroot(rootfs); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := restrictCapabilities(sc); err != nil {
		return err
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOSTNAME=" + hostname}
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	argv := append(append([]string{}, c.Command...), c.Args...)
	if err := unix.Exec(entry, argv, env); err != nil {
		return fmt.Errorf("exec %s (image %s): %w", entry, c.Image, err)
	}
	return nil
}

func readPod(path string) (*corev1.Pod, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("static pod manifest: %w", err)
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(b, pod); err != nil {
		return nil, fmt.Errorf("static pod manifest %s: %w", path, err)
	}
	if !pod.Spec.HostNetwork {
		return nil, fmt.Errorf("static pod %s: the lab runs host-network pods only", pod.Name)
	}
	if len(pod.Spec.Containers) != 1 {
		return nil, fmt.Errorf("static pod %s: the lab runs one container, not %d", pod.Name, len(pod.Spec.Containers))
	}
	return pod, nil
}

// checkHostPath applies the kubelet's hostPath type checks (and creates what *OrCreate asks for).
func checkHostPath(src string, hp *corev1.HostPathVolumeSource) error {
	t := corev1.HostPathUnset
	if hp.Type != nil {
		t = *hp.Type
	}
	st, err := os.Stat(src)
	switch t {
	case corev1.HostPathDirectoryOrCreate:
		if errors.Is(err, os.ErrNotExist) {
			return os.MkdirAll(src, 0o755)
		}
	case corev1.HostPathFileOrCreate:
		if errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
				return err
			}
			return os.WriteFile(src, nil, 0o644)
		}
	case corev1.HostPathFile:
		if err != nil {
			return fmt.Errorf("hostPath type File: %w (the kubelet would not start the pod)", err)
		}
		if !st.Mode().IsRegular() {
			return errors.New("hostPath type File: not a regular file")
		}
	case corev1.HostPathDirectory:
		if err != nil {
			return fmt.Errorf("hostPath type Directory: %w (the kubelet would not start the pod)", err)
		}
		if !st.IsDir() {
			return errors.New("hostPath type Directory: not a directory")
		}
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// bind mounts src on dst (created as a file or directory like src), read-only when ro.
func bind(src, dst string, ro, recursive bool) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if st.IsDir() {
		err = os.MkdirAll(dst, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
		err = os.WriteFile(dst, nil, 0o600)
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", dst, err)
	}
	flags := uintptr(unix.MS_BIND)
	if recursive {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(src, dst, "", flags, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	if ro {
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", dst, err)
		}
	}
	return nil
}

// writeHosts writes a container's /etc/hosts as the kubelet does for a host-network pod.
func writeHosts(path, hostname string, aliases []corev1.HostAlias) error {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("127.0.1.1\t" + hostname + "\n")
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		b.WriteString(a.IP + "\t" + strings.Join(a.Hostnames, "\t") + "\n")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
