//go:build tools

// Package tools pins the operator this module builds.
package tools

import _ "github.com/argoproj/argo-workflows/v3/cmd/workflow-controller"
