//go:build tools

// Package tools pins the operator this module builds.
package tools

import _ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
