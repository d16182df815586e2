{{/* Names, labels and the values every template shares. */}}

{{- define "embedgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "embedgate.fullname" -}}
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

{{- define "embedgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "embedgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "embedgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "embedgate.labels" -}}
helm.sh/chart: {{ include "embedgate.chart" . }}
{{ include "embedgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "embedgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "embedgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "embedgate.secretName" -}}
{{- default (include "embedgate.fullname" .) .Values.credentials.existingSecret }}
{{- end }}

{{/* The model repository URL, checked. */}}
{{- define "embedgate.modelRepository" -}}
{{- $url := required "modelRepository is required: s3://host:port/bucket/path" .Values.modelRepository }}
{{- if not (regexMatch "^s3://[^/]+/[^/]+" $url) }}
{{- fail (printf "modelRepository must be s3://host:port/bucket/path, not %q" $url) }}
{{- end }}
{{- $url }}
{{- end }}

{{/* An environment variable read from the credentials Secret. */}}
{{- define "embedgate.secretEnv" -}}
- name: {{ .key }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end }}

{{/* What the pod needs to reach the S3 repository. */}}
{{- define "embedgate.s3Env" -}}
{{- $secret := include "embedgate.secretName" . }}
{{- range $i, $key := list "AWS_ACCESS_KEY_ID" "AWS_SECRET_ACCESS_KEY" "AWS_DEFAULT_REGION" }}
{{- if $i }}{{ "\n" }}{{ end }}
{{- include "embedgate.secretEnv" (dict "key" $key "secret" $secret) }}
{{- end }}
{{- end }}
