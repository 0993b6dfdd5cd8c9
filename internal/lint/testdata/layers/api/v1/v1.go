// Package v1 keeps its rule.
package v1
