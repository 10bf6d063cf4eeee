# The management-side controller: provider components for clusterctl / kubectl.

.PHONY: components

components: ## Render the provider components (CRD, RBAC, manager) into $(OUT)/components.yaml (needs kubectl).
	@command -v kubectl >/dev/null || { echo "components: kubectl is needed for 'kubectl kustomize'"; exit 1; }
	@mkdir -p $(OUT)
	kubectl kustomize config/default > $(OUT)/components.yaml
	@echo "wrote $(OUT)/components.yaml"
