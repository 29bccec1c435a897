{{/*
Chart name, truncated to the 63 characters a DNS label allows.
*/}}
{{- define "leased.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: the release name, plus the chart name unless the release
name already contains it.
*/}}
{{- define "leased.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "leased.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "leased.labels" -}}
helm.sh/chart: {{ include "leased.chart" . }}
{{ include "leased.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/component: server
app.kubernetes.io/part-of: leased
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels: stable across upgrades, so never add the version here.
*/}}
{{- define "leased.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leased.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the ServiceAccount the pods run as.
*/}}
{{- define "leased.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "leased.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The container image: repository:tag, or repository:tag@digest when a digest is set.
*/}}
{{- define "leased.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
Secret and key holding the Redis URL; empty when the pods use their in-process store.
*/}}
{{- define "leased.redisSecretName" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecret }}
{{- else if .Values.redis.url }}
{{- printf "%s-redis" (include "leased.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "leased.redisSecretKey" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecretKey }}
{{- else }}
{{- print "redis-url" }}
{{- end }}
{{- end }}

{{/*
Secret holding the tokens file: auth.existingSecret, or the chart-made <fullname>-tokens.
*/}}
{{- define "leased.authSecretName" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else }}
{{- printf "%s-tokens" (include "leased.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The chart-made tokens file, base64-encoded (auth.enabled without auth.existingSecret): the one
already in the cluster when `lookup` finds the Secret, so the token survives upgrades, else a new
file with one admin token allowed every name and every operation. randAlphaNum draws from
crypto/rand. `lookup` finds nothing under `helm template`, `helm lint`, a client-side
`--dry-run` or a first install, so each of those makes a new token.
*/}}
{{- define "leased.generatedTokensFile" -}}
{{- $name := include "leased.authSecretName" . }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $name | default dict }}
{{- $stored := dig "data" .Values.auth.key "" $existing }}
{{- if $stored }}
{{- $stored }}
{{- else }}
{{- $operations := list "acquire" "renew" "release" "describe" "watch" "check" "list" "revoke" }}
{{- $token := dict "client" "admin" "token" (randAlphaNum 48) "prefixes" (list "") "operations" $operations }}
{{- dict "tokens" (list $token) | toJson | b64enc }}
{{- end }}
{{- end }}

{{/*
"true" when the release runs without access control (auth.enabled=false, auth.insecure=true).
*/}}
{{- define "leased.insecure" -}}
{{- if and (not .Values.auth.enabled) .Values.auth.insecure }}true{{ end }}
{{- end }}

{{/*
Port number the kubelet probes (gRPC probes take a number, not a name): the gRPC port, or the plaintext health port when the gRPC port has TLS.
*/}}
{{- define "leased.probePortNumber" -}}
{{- if .Values.tls.enabled }}{{ int .Values.health.port }}{{ else }}{{ int .Values.containerPort }}{{ end }}
{{- end }}

{{/*
Checks across several values that values.schema.json cannot express; fails the render with a
message saying what to change.
*/}}
{{- define "leased.validateValues" -}}
{{- $redis := include "leased.redisSecretName" . }}
{{- if and (not $redis) (or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1)) }}
{{- fail "leased: more than one replica (replicaCount > 1 or autoscaling.enabled) needs Redis: set redis.url or redis.existingSecret. Without Redis each pod keeps leases in its own memory, so two pods would grant the same lease." }}
{{- end }}
{{- if and .Values.redis.existingSecret (not .Values.redis.existingSecretKey) }}
{{- fail "leased: redis.existingSecret needs redis.existingSecretKey (the key holding the URL)" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "leased: tls.enabled needs tls.secretName (a Secret of type kubernetes.io/tls)" }}
{{- end }}
{{- if and .Values.tls.clientCA.enabled (not .Values.tls.enabled) }}
{{- fail "leased: tls.clientCA.enabled (mTLS) needs tls.enabled" }}
{{- end }}
{{- if and (not .Values.auth.enabled) (not .Values.auth.insecure) }}
{{- fail "leased: auth.enabled=false runs leased without access control: anyone who reaches the pods can take, release, list or revoke any lease. Keep auth.enabled=true (the chart makes a token Secret unless auth.existingSecret names yours), or confirm with auth.insecure=true as well." }}
{{- end }}
{{- if and .Values.auth.enabled .Values.auth.insecure }}
{{- fail "leased: auth.insecure=true applies only with auth.enabled=false; remove auth.insecure (or set it to false) while auth is on." }}
{{- end }}
{{- if and (include "leased.insecure" .) (has .Values.service.type (list "LoadBalancer" "NodePort")) }}
{{- fail (printf "leased: auth.insecure=true is refused with service.type=%s, which exposes the unauthenticated gRPC port (admin calls included) outside the cluster. Use service.type=ClusterIP, or turn auth on (auth.enabled=true, auth.insecure=false)." .Values.service.type) }}
{{- end }}
{{- if and .Values.metrics.service.enabled (not .Values.metrics.enabled) }}
{{- fail "leased: metrics.service.enabled needs metrics.enabled" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "leased: metrics.serviceMonitor.enabled needs metrics.enabled" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) }}
{{- fail "leased: metrics.serviceMonitor.enabled needs metrics.service.enabled (the ServiceMonitor scrapes the Service's metrics port), or use metrics.podMonitor.enabled to scrape the pods without putting the metrics port on the Service." }}
{{- end }}
{{- if and .Values.metrics.podMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "leased: metrics.podMonitor.enabled needs metrics.enabled" }}
{{- end }}
{{- if le (int .Values.terminationGracePeriodSeconds) (int .Values.config.drainGraceSeconds) }}
{{- fail (printf "leased: terminationGracePeriodSeconds (%d) must exceed config.drainGraceSeconds (%d), or pods are killed mid-drain" (int .Values.terminationGracePeriodSeconds) (int .Values.config.drainGraceSeconds)) }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "leased: set only one of podDisruptionBudget.minAvailable and podDisruptionBudget.maxUnavailable" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (kindIs "invalid" .Values.podDisruptionBudget.minAvailable) (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable) }}
{{- fail "leased: podDisruptionBudget.enabled needs podDisruptionBudget.minAvailable or podDisruptionBudget.maxUnavailable" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (lt (int .Values.autoscaling.maxReplicas) (int .Values.autoscaling.minReplicas)) }}
{{- fail "leased: autoscaling.maxReplicas must be at least autoscaling.minReplicas" }}
{{- end }}
{{- $ports := list (int .Values.containerPort) }}
{{- if .Values.tls.enabled }}{{ $ports = append $ports (int .Values.health.port) }}{{ end }}
{{- if .Values.metrics.enabled }}{{ $ports = append $ports (int .Values.metrics.port) }}{{ end }}
{{- if ne (len $ports) (len (uniq $ports)) }}
{{- fail "leased: containerPort, health.port and metrics.port must differ" }}
{{- end }}
{{- end }}
