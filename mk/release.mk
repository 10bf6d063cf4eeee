# Releases (issue 12): the clusterctl add-on provider release and the container images, built
# with nothing but Go (kustomize's and go-containerregistry's Go APIs; no kubectl, no Docker).
#
# Every image reference comes from REGISTRY and VERSION: the manager image in
# addon-components.yaml (the default of ${CAPLB_MANAGER_IMAGE}), the agent image in the agent
# manifests, and the images `make images` writes.

REGISTRY ?= ghcr.io/caplb
# A semantic version with a leading v; its major.minor must be a release series in metadata.yaml.
VERSION ?= v0.1.0-dev
COMMIT ?= $(shell git describe --always --dirty --abbrev=12 --match=NO-TAGS 2>/dev/null || echo unknown)
MANAGER_IMAGE := $(REGISTRY)/caplb-manager:$(VERSION)
AGENT_IMAGE := $(REGISTRY)/caplb-agent:$(VERSION)
RELEASE_DIR ?= $(OUT)/release
IMAGES_DIR ?= $(OUT)/images
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64

# --version on both binaries (cmd/internal/version); `make build` and `make images` use these.
GO_LDFLAGS := -X github.com/caplb/caplb/cmd/internal/version.Version=$(VERSION) \
	-X github.com/caplb/caplb/cmd/internal/version.Commit=$(COMMIT)

.PHONY: release release-manifests components

release: release-manifests images chart ## Every asset of a release into $(RELEASE_DIR): the manifests (below), the Helm chart caplb-<version>.tgz, the images as OCI tarballs, checksums.txt.
	@for img in caplb-manager caplb-agent; do \
	  echo "tar $(RELEASE_DIR)/$$img-$(VERSION).oci.tar"; \
	  tar --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner \
	    -C $(IMAGES_DIR)/$$img -cf $(RELEASE_DIR)/$$img-$(VERSION).oci.tar . || exit 1; \
	done
	$(GO) run ./hack/mkrelease -checksums -out $(RELEASE_DIR)

release-manifests: ## Only the manifests, fast: addon-components.yaml, caplb-standalone.yaml (kubectl apply, no clusterctl), metadata.yaml, agent manifests, cluster templates.
	$(GO) run ./hack/mkrelease -out $(RELEASE_DIR) -version $(VERSION) \
	  -manager-image $(MANAGER_IMAGE) -agent-image $(AGENT_IMAGE)

components: release-manifests ## Alias of `make release-manifests` (kept for the old name).

SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: images
images: ## Build OCI image layouts of caplb-manager and caplb-agent (amd64, arm64) into $(OUT)/images, no Docker needed; checks each.
	$(GO) run ./hack/mkimages -out $(IMAGES_DIR) -registry $(REGISTRY) -version $(VERSION) -commit $(COMMIT) \
	  -platforms $(IMAGE_PLATFORMS) -source-date-epoch $(SOURCE_DATE_EPOCH) -ldflags '$(GO_LDFLAGS)'
