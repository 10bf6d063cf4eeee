{{/* Labels every object carries (the provider label as in config/default). Object names are fixed (caplb-...), as in config/: one caplb per cluster. */}}
{{- define "caplb.labels" -}}
cluster.x-k8s.io/provider: addon-caplb
app.kubernetes.io/part-of: caplb
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* An image reference pinned by tag: the value's tag or the chart's appVersion, never latest. */}}
{{- define "caplb.image" -}}
{{- $tag := .tag | default .root.Chart.AppVersion -}}
{{- if or (eq $tag "latest") (eq $tag "") -}}
{{- fail (printf "%s: the image tag must be a version, not %q" .name $tag) -}}
{{- end -}}
{{- printf "%s/%s:%s" .root.Values.image.registry .name $tag -}}
{{- end }}

{{- define "caplb.managerImage" -}}
{{- include "caplb.image" (dict "root" . "name" "caplb-manager" "tag" .Values.manager.tag) -}}
{{- end }}

{{- define "caplb.agentImage" -}}
{{- include "caplb.image" (dict "root" . "name" "caplb-agent" "tag" .Values.agent.tag) -}}
{{- end }}

{{- define "caplb.webhookService" -}}caplb-webhook-service{{- end }}

{{/* The agent's admin listener (agent.config.admin.listen, the agent's default when unset). */}}
{{- define "caplb.agentListen" -}}
{{- ((.Values.agent.config.admin | default dict).listen | default "127.0.0.1:7473") -}}
{{- end }}
