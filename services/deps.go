//go:build tools

package services

import (
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/api/resource"
	_ "sigs.k8s.io/yaml"
)
