# The management-side controller. Its provider components (CRD, RBAC, manager) are rendered by
# `make release` (mk/release.mk) into $(OUT)/release/addon-components.yaml.
