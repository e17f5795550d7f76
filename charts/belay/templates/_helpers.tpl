{{- define "belay.fullname" -}}
{{- printf "%s" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "belay.labels" -}}
app.kubernetes.io/name: belay
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "belay.selector" -}}
app.kubernetes.io/name: belay
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "belay.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "belay.egress" -}}
{{- $out := list -}}
{{- range . -}}
{{- $entry := dict "ports" (default list .ports) -}}
{{- if .cidr }}{{- $_ := set $entry "cidr" .cidr -}}{{- end -}}
{{- if .namespaceLabels }}{{- $_ := set $entry "namespace_labels" .namespaceLabels -}}{{- end -}}
{{- if .podLabels }}{{- $_ := set $entry "pod_labels" .podLabels -}}{{- end -}}
{{- $out = append $out $entry -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The operator's settings (belay.controller.settings.OperatorSettings), as one JSON document. */}}
{{- define "belay.settings" -}}
{{- $settings := dict
  "harness_image" (default (include "belay.image" .) .Values.sessions.harnessImage)
  "sandbox_image" (default (include "belay.image" .) .Values.sessions.sandboxImage)
  "image_pull_policy" .Values.image.pullPolicy
  "event_store" .Values.stores.events
  "artifact_store" .Values.stores.artifacts
  "run_as_user" .Values.sessions.runAsUser
  "stop_drain_s" .Values.sessions.stopDrainSeconds
  "failure_backoff_s" .Values.sessions.failureBackoffSeconds
  "sandbox_pool_size" .Values.sandboxPool.size
  "sandbox_pool_refill_delay_s" .Values.sandboxPool.refillDelaySeconds
  "store_egress" (include "belay.egress" .Values.sessions.storeEgress | fromJsonArray)
  "model_egress" (include "belay.egress" .Values.sessions.modelEgress | fromJsonArray)
  "git_egress" (include "belay.egress" .Values.sessions.gitEgress | fromJsonArray)
  "harness_images" .Values.sessions.harnessImages
  "sandbox_images" .Values.sessions.sandboxImages
  "sandbox_runtime_classes" .Values.sessions.sandbox.runtimeClassNames
  "allowed_runtime_classes" .Values.sessions.sandbox.allowedRuntimeClassNames
  "sandbox_node_selector" .Values.sessions.sandbox.nodeSelector
  "sandbox_tolerations" .Values.sessions.sandbox.tolerations
  "sandbox_user_namespace" (not .Values.sessions.sandbox.hostUsers)
-}}
{{- if .Values.sessions.sandbox.runtimeClassName }}{{- $_ := set $settings "sandbox_runtime_class" .Values.sessions.sandbox.runtimeClassName -}}{{- end -}}
{{- if .Values.stores.existingSecret }}{{- $_ := set $settings "store_secret" .Values.stores.existingSecret -}}{{- end -}}
{{- if .Values.stores.etcdCredentialsSecret }}{{- $_ := set $settings "etcd_credentials_secret" .Values.stores.etcdCredentialsSecret -}}{{- end -}}
{{- toJson $settings -}}
{{- end -}}
