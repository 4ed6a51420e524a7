//go:build tools

// Package tools pins build-time dependencies so go.mod records them.
package tools
