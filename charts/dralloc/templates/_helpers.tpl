{{/* The operator's namespace (namespace.name; not the release's, see values.yaml). */}}
{{- define "dralloc.namespace" -}}
{{- $ns := required "namespace.name is required" .Values.namespace.name -}}
{{- if has $ns (list "default" "kube-system" "kube-public" "kube-node-lease") -}}
{{- fail (printf "namespace.name=%s: the operator's namespace is left out of the gating webhook and the admission policies (so that they never hold back the operator itself), so pods there would go ungated and unguarded. Install dralloc in a namespace of its own (the default: dralloc-system)" $ns) -}}
{{- end -}}
{{- $ns -}}
{{- end -}}

{{/* On install and upgrade (not `helm template`), once per render: a namespace that already
runs pods other than dralloc's would lose the gate and the policies as the operator's own. */}}
{{- define "dralloc.checkNamespacePods" -}}
{{- $ns := include "dralloc.namespace" . -}}
{{- range (lookup "v1" "Pod" $ns "").items | default list -}}
{{- if ne (dig "metadata" "labels" "app.kubernetes.io/name" "" .) "dralloc" -}}
{{- fail (printf "namespace.name=%s: the namespace runs pods that are not dralloc's (%s), and the operator's namespace is left out of the gating webhook and the admission policies, so they would go ungated and unguarded. Install dralloc in a namespace of its own" $ns .metadata.name) -}}
{{- end -}}
{{- end -}}
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
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
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

{{- /* The users the operator acts as, comma-separated: its ServiceAccount, then
allocationPolicy.operatorUsers. One list feeds the identity ConfigMap (the pod-protocol and
claim-allocation policies let these users act as the operator) and the fencing policy (which
lets them only while they hold the Lease), so no identity may allocate unfenced. */}}
{{- define "dralloc.operatorUsers" -}}
{{- $users := list (printf "system:serviceaccount:%s:dralloc-operator" (include "dralloc.namespace" .)) }}
{{- range .Values.allocationPolicy.operatorUsers }}
{{- if or (contains "," .) (eq (trim .) "") }}
{{- fail (printf "allocationPolicy.operatorUsers: %q is not a user name (no commas, not empty)" .) }}
{{- end }}
{{- $users = append $users . }}
{{- end }}
{{- join "," $users }}
{{- end }}

{{- /* The groups whose members the operator may act as (allocationPolicy.operatorGroups),
comma-separated: the identity ConfigMap and the fencing policy, as dralloc.operatorUsers. */}}
{{- define "dralloc.operatorGroups" -}}
{{- range .Values.allocationPolicy.operatorGroups }}
{{- if or (contains "," .) (eq (trim .) "") }}
{{- fail (printf "allocationPolicy.operatorGroups: %q is not a group name (no commas, not empty)" .) }}
{{- end }}
{{- end }}
{{- join "," .Values.allocationPolicy.operatorGroups }}
{{- end }}

{{- /* CEL: the request comes from one of the operator's identities (dralloc.operatorUsers,
dralloc.operatorGroups). The fencing policy and the operator-pod-writes and operator-claim-writes policies match by it. */}}
{{- define "dralloc.isOperatorCEL" -}}
request.userInfo.username in [
{{- range $i, $user := splitList "," (include "dralloc.operatorUsers" .) }}{{ if $i }},{{ end }}
  {{ $user | replace "\\" "\\\\" | replace "'" "\\'" | squote }}
{{- end }}
] ||
(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in [
{{- range $i, $group := compact (splitList "," (include "dralloc.operatorGroups" .)) }}{{ if $i }},{{ end }}
  {{ $group | replace "\\" "\\\\" | replace "'" "\\'" | squote }}
{{- end }}
]))
{{- end }}
