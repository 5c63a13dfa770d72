//go:build tools

// Package tools pins the KWOK controller this module builds.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
