{{/* Names and labels shared by every object of the chart. */}}
{{- define "pao.labels" -}}
app.kubernetes.io/name: platform-ai-optimizer
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: platform-ai-optimizer
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* A digest, when given, pins the image (GitOps, admission policies that require digests). */}}
{{- define "pao.image" -}}
{{- if .Values.image.digest -}}
{{ printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else -}}
{{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end -}}
{{- end -}}

{{/* What a user adds to a component's pods: priority, extra volumes (rendered inside spec). */}}
{{- define "pao.podExtras" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/* The product's names are fixed: callers and other components rely on them. */}}
{{- define "pao.agentNamespace" -}}platform-agent{{- end -}}
{{- define "pao.llmsNamespace" -}}platform-llms{{- end -}}
{{- define "pao.apiKeysSecret" -}}
{{- default "platform-ai-optimizer-api-keys" .Values.apiKeys.existingSecret -}}
{{- end -}}

{{- define "pao.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "pao.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Usage on PostgreSQL (a DSN in an existing Secret) instead of the SQLite file on a volume. */}}
{{- define "pao.usageOnPostgres" -}}
{{- if .Values.usage.postgres.existingSecret }}true{{ end -}}
{{- end -}}

{{/*
Workload identity for hosted providers (ExternalProvider auth.method WorkloadIdentity): the
ServiceAccount token each cloud exchanges, projected with that cloud's audience into the operator
(discovery) and the proxy (calls). Azure's Entra ID takes audience api://AzureADTokenExchange;
Google STS the pool provider named in workloadIdentity.google.audience. On GKE's own workload
identity nothing is mounted: the metadata server serves the pod's identity.
*/}}
{{- define "pao.workloadIdentityEnv" -}}
{{- if .Values.workloadIdentity.azure.enabled }}
- { name: AZURE_FEDERATED_TOKEN_FILE, value: /var/run/secrets/azure/tokens/azure-identity-token }
{{- end }}
{{- if .Values.workloadIdentity.google.audience }}
- { name: GOOGLE_FEDERATED_TOKEN_FILE, value: /var/run/secrets/google/tokens/token }
{{- end }}
{{- end }}

{{- define "pao.workloadIdentityMounts" -}}
{{- if .Values.workloadIdentity.azure.enabled }}
- { name: azure-identity-token, mountPath: /var/run/secrets/azure/tokens, readOnly: true }
{{- end }}
{{- if .Values.workloadIdentity.google.audience }}
- { name: google-identity-token, mountPath: /var/run/secrets/google/tokens, readOnly: true }
{{- end }}
{{- end }}

{{- define "pao.workloadIdentityVolumes" -}}
{{- if .Values.workloadIdentity.azure.enabled }}
- name: azure-identity-token
  projected:
    sources:
      - serviceAccountToken:
          path: azure-identity-token
          audience: api://AzureADTokenExchange
          expirationSeconds: 3600
{{- end }}
{{- if .Values.workloadIdentity.google.audience }}
- name: google-identity-token
  projected:
    sources:
      - serviceAccountToken:
          path: token
          audience: {{ .Values.workloadIdentity.google.audience | quote }}
          expirationSeconds: 3600
{{- end }}
{{- end }}
