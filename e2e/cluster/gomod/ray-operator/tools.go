//go:build tools

// Package tools pins the operator this module builds.
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
