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
{{- $pullSecrets := list -}}
{{- range .Values.imagePullSecrets }}{{- $pullSecrets = append $pullSecrets .name -}}{{- end -}}
{{- $settings := dict
  "harness_image" (default (include "belay.image" .) .Values.sessions.harnessImage)
  "sandbox_image" (default (include "belay.image" .) .Values.sessions.sandboxImage)
  "image_pull_policy" .Values.image.pullPolicy
  "event_store" (include "belay.eventStore" .)
  "artifact_store" .Values.stores.artifacts
  "run_as_user" .Values.sessions.runAsUser
  "stop_drain_s" .Values.sessions.stopDrainSeconds
  "failure_backoff_s" .Values.sessions.failureBackoffSeconds
  "harness_start_deadline_s" .Values.sessions.harnessStartDeadlineSeconds
  "sandbox_pool_size" .Values.sandboxPool.size
  "sandbox_pool_refill_delay_s" .Values.sandboxPool.refillDelaySeconds
  "store_egress" (include "belay.egress" (include "belay.storeEgress" . | fromJsonArray) | fromJsonArray)
  "model_egress" (include "belay.egress" .Values.sessions.modelEgress | fromJsonArray)
  "git_egress" (include "belay.egress" .Values.sessions.gitEgress | fromJsonArray)
  "harness_images" .Values.sessions.harnessImages
  "sandbox_images" .Values.sessions.sandboxImages
  "sandbox_runtime_classes" .Values.sessions.sandbox.runtimeClassNames
  "allowed_runtime_classes" .Values.sessions.sandbox.allowedRuntimeClassNames
  "sandbox_node_selector" .Values.sessions.sandbox.nodeSelector
  "sandbox_tolerations" .Values.sessions.sandbox.tolerations
  "sandbox_user_namespace" (not .Values.sessions.sandbox.hostUsers)
  "harness_service_account" .Values.sessions.harnessServiceAccount.name
  "harness_resources" .Values.sessions.harnessResources
  "image_pull_secrets" $pullSecrets
-}}
{{- if include "belay.recordKeySecret" . }}{{- $_ := set $settings "record_key_secret" (include "belay.recordKeySecret" .) -}}{{- end -}}
{{- if .Values.sessions.sandbox.runtimeClassName }}{{- $_ := set $settings "sandbox_runtime_class" .Values.sessions.sandbox.runtimeClassName -}}{{- end -}}
{{- if .Values.stores.existingSecret }}{{- $_ := set $settings "store_secret" .Values.stores.existingSecret -}}{{- end -}}
{{- with include "belay.etcdCredentialsSecret" . }}{{- $_ := set $settings "etcd_credentials_secret" . -}}{{- end -}}
{{- toJson $settings -}}
{{- end -}}

{{- define "belay.serviceAccountName" -}}
{{- default (include "belay.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The Secret holding BELAY_RECORD_KEY, or nothing when the record key is off. */}}
{{- define "belay.recordKeySecret" -}}
{{- if .Values.stores.recordKey.enabled -}}
{{- default (printf "%s-record-key" (include "belay.fullname" .)) .Values.stores.recordKey.existingSecret -}}
{{- end -}}
{{- end -}}

{{/*
The settings without which no session can run, refused at install with what to write instead.
The events URL is opened from every session's namespace, so a bare Service name would resolve in
the wrong one.
*/}}
{{- define "belay.checks" -}}
{{- if .Values.etcd.deploy -}}
{{- if or .Values.stores.events .Values.stores.etcdCredentialsSecret -}}
{{- fail "etcd.deploy and stores.events (or stores.etcdCredentialsSecret) are both set: with etcd.deploy the record goes to the chart's own etcd; leave stores.events and stores.etcdCredentialsSecret empty, or set etcd.deploy=false to use the etcd they name" -}}
{{- end -}}
{{- end -}}
{{- $events := required "stores.events is required: the session record's etcd, e.g. --set stores.events=etcd://belay-etcd.belay-system:2379, or --set etcd.deploy=true for an evaluation etcd the chart deploys (docs/operator.md#install-on-a-cluster)" (include "belay.eventStore" .) -}}
{{- $_ := required "stores.artifacts is required: the artifact bucket, e.g. --set stores.artifacts=s3://belay-artifacts (docs/operator.md#install-on-a-cluster)" .Values.stores.artifacts -}}
{{- if hasPrefix "etcd://" $events -}}
{{- $host := regexReplaceAll "[:/,?].*$" (trimPrefix "etcd://" $events) "" -}}
{{- if not (or (contains "." $host) (hasPrefix "[" $host) (eq $host "localhost")) -}}
{{- fail (printf "stores.events names the etcd host %q without its namespace: harness pods open it from each session's namespace, where it does not resolve; write %s.<namespace> (or a full name or an address)" $host $host) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The harness's way to the record's etcd, read from its URL (stores.events, or the chart's etcd): an
address gives its /32 (or /128), a Service named with its namespace (name.namespace[.svc...])
every pod of that namespace; on the port named (2379 by default). A host known by another name (outside the cluster) gives
nothing: sessions.storeEgress says where it is. The artifact store's endpoint is not in the values
(it is the Secret's AWS_ENDPOINT_URL): sessions.storeEgress names it.
*/}}
{{- define "belay.eventsEgress" -}}
{{- $out := list -}}
{{- $events := include "belay.eventStore" . -}}
{{- if hasPrefix "etcd://" $events -}}
{{- $hosts := regexReplaceAll "[/?].*$" (trimPrefix "etcd://" $events) "" -}}
{{- range splitList "," $hosts -}}
{{- $port := 2379 -}}
{{- $host := . -}}
{{- if regexMatch "^\\[.*\\]:[0-9]+$" . -}}
{{- $port = regexFind "[0-9]+$" . | int -}}{{- $host = regexReplaceAll "^\\[(.*)\\]:[0-9]+$" . "${1}" -}}
{{- else if regexMatch "^\\[.*\\]$" . -}}
{{- $host = trimAll "[]" . -}}
{{- else if regexMatch ":[0-9]+$" . -}}
{{- $port = regexFind "[0-9]+$" . | int -}}{{- $host = regexReplaceAll ":[0-9]+$" . "" -}}
{{- end -}}
{{- if regexMatch "^[0-9.]+$" $host -}}
{{- $out = append $out (dict "cidr" (printf "%s/32" $host) "ports" (list $port)) -}}
{{- else if contains ":" $host -}}
{{- $out = append $out (dict "cidr" (printf "%s/128" $host) "ports" (list $port)) -}}
{{- else if regexMatch "^[a-z0-9-]+\\.[a-z0-9-]+(\\.svc(\\..*)?)?$" $host -}}
{{- $namespace := index (splitList "." $host) 1 -}}
{{- $out = append $out (dict "namespaceLabels" (dict "kubernetes.io/metadata.name" $namespace) "ports" (list $port)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Where harnesses reach the stores: the record's etcd as stores.events names it, and sessions.storeEgress. */}}
{{- define "belay.storeEgress" -}}
{{- toJson (concat (include "belay.eventsEgress" . | fromJsonArray) .Values.sessions.storeEgress) -}}
{{- end -}}

{{/*
Where the operator reaches the Kubernetes API: networkPolicy.apiServerEgress, else the addresses
and port of the `kubernetes` Service's EndpointSlices as the cluster has them at install (the API
server's real address: traffic to the Service is sent there before a NetworkPolicy judges it), else
(helm template reads no cluster) any address on 443 and 6443.
*/}}
{{- define "belay.apiServerEgress" -}}
{{- $out := .Values.networkPolicy.apiServerEgress -}}
{{- if not $out -}}
{{- $slices := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "" -}}
{{- range (dig "items" list $slices) -}}
{{- if eq (dig "metadata" "labels" "kubernetes.io/service-name" "" .) "kubernetes" -}}
{{- $ports := list -}}
{{- range (default list .ports) }}{{ $ports = append $ports (int .port) }}{{ end -}}
{{- range (default list .endpoints) -}}
{{- range .addresses -}}
{{- $out = append $out (dict "cidr" (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) "ports" $ports) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $out -}}
{{- $out = list (dict "cidr" "0.0.0.0/0" "ports" (list 443 6443)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}


{{/* The chart's evaluation etcd (etcd.deploy): its StatefulSet and headless Service. */}}
{{- define "belay.etcdName" -}}
{{- printf "%s-etcd" (include "belay.fullname" .) | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/*
The session record's URL: the chart's etcd when it deploys one (its headless Service, named with
its namespace so every session namespace resolves it), else stores.events.
*/}}
{{- define "belay.eventStore" -}}
{{- if .Values.etcd.deploy -}}
{{- printf "etcd://%s.%s:2379/belay" (include "belay.etcdName" .) .Release.Namespace -}}
{{- else -}}
{{- .Values.stores.events -}}
{{- end -}}
{{- end -}}

{{/* The TLS Secret with the etcd client certificate: the chart's own with etcd.deploy. */}}
{{- define "belay.etcdCredentialsSecret" -}}
{{- if .Values.etcd.deploy -}}
{{- printf "%s-client" (include "belay.etcdName" .) -}}
{{- else -}}
{{- .Values.stores.etcdCredentialsSecret -}}
{{- end -}}
{{- end -}}

{{- define "belay.etcdSelector" -}}
app.kubernetes.io/name: belay-etcd
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
