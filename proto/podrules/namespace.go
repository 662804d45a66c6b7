package podrules

// DefaultNamespace is the namespace of a request or object that names none
// (metav1.NamespaceDefault).
const DefaultNamespace = "default"

// NamespaceOrDefault returns ns, or DefaultNamespace when ns is empty.
func NamespaceOrDefault(ns string) string {
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}
