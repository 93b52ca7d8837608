{{/* The operator's namespace (namespace.name; not the release's, see values.yaml). */}}
{{- define "dralloc.namespace" -}}
{{- required "namespace.name is required" .Values.namespace.name -}}
{{- end -}}

{{/* In-tree mode (apiGroup resource.k8s.io)? "true" or "". */}}
{{- define "dralloc.inTree" -}}
{{- if eq .Values.apiGroup "resource.k8s.io" -}}true
{{- else if ne .Values.apiGroup "resource.dralloc.dev" -}}
{{- fail (printf "apiGroup must be resource.dralloc.dev or resource.k8s.io, not %q" .Values.apiGroup) -}}
{{- end -}}
{{- end -}}

{{/* The label manifests/base/kustomization.yaml puts on every object. */}}
{{- define "dralloc.partOf" -}}
app.kubernetes.io/part-of: dralloc
{{- end -}}

{{/* The operator pods' labels (selectors of the Deployment and the Services). */}}
{{- define "dralloc.operatorSelector" -}}
app.kubernetes.io/name: dralloc
app.kubernetes.io/component: operator
{{- end -}}

{{- define "dralloc.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "dralloc.certMode" -}}
{{- $mode := .Values.webhook.certificate.mode -}}
{{- if not (has $mode (list "job" "certManager" "secret")) -}}
{{- fail (printf "webhook.certificate.mode must be job, certManager or secret, not %q" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* The namespaces neither the webhook nor the admission policy ever sees. */}}
{{- define "dralloc.excludedNamespaces" -}}
[kube-system, kube-node-lease, {{ include "dralloc.namespace" . }}]
{{- end -}}
