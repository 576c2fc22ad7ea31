{{/* Name prefix of every object: <release>-gpu-dra-driver, or the release name when it already
contains the chart name, or fullnameOverride. */}}
{{- define "gpu-dra-driver.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpu-dra-driver.pluginName" -}}
{{- printf "%s-kubelet-plugin" (include "gpu-dra-driver.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-dra-driver.controllerName" -}}
{{- printf "%s-controller" (include "gpu-dra-driver.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-dra-driver.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpu-dra-driver.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpu-dra-driver.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* DeviceClass names are <shape>.<domain>, the domain being the driver name without a leading
"gpu." label (dra_driver/deviceclasses.py says why; a test keeps the two in step). */}}
{{- define "gpu-dra-driver.classDomain" -}}
{{- trimPrefix "gpu." .Values.driverName -}}
{{- end -}}

{{- define "gpu-dra-driver.pluginUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpu-dra-driver.pluginName" .) -}}
{{- end -}}

{{/* Same defaults as controller/config.py. */}}
{{- define "gpu-dra-driver.leaseName" -}}
{{- .Values.controller.leaderElection.leaseName | default (printf "%s-controller" (replace "." "-" .Values.driverName)) -}}
{{- end -}}

{{/* The ConfigMap the controller keeps its learned workload profile in. */}}
{{- define "gpu-dra-driver.workloadConfigMap" -}}
{{- printf "%s-workload" (include "gpu-dra-driver.leaseName" .) | trunc 253 -}}
{{- end -}}

{{/* Refuse what would install but not work. `helm install` checks Chart.yaml's kubeVersion
itself; `helm template` does not, so the chart says it too. */}}
{{- define "gpu-dra-driver.checks" -}}
{{- if semverCompare "<1.34.0-0" .Capabilities.KubeVersion.Version -}}
{{- fail (printf "gpu-dra-driver needs Kubernetes 1.34 or newer (resource.k8s.io/v1); kubeVersion is %s" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- end -}}
