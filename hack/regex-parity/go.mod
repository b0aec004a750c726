// A Go module of ours: Go's regexp and github.com/grafana/regexp (both BSD licensed)
// judge the operator's regex parity corpus (make regex-parity).
module loki-zone-operator.dev/hack/regex-parity

go 1.25

require github.com/grafana/regexp v0.0.0-20250905101755-5eb4f3acbf71
