package admission

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
)

// Kubernetes' validation of the file volumes' items
// (pkg/apis/core/validation: validateDownwardAPIVolumeSource,
// validateProjectedVolumeSource, validateKeyToPath), so a bad item is
// refused 422 at admission, not only failed on the node. One difference:
// the paths of a downwardAPI item's errors carry its index
// ("downwardAPI.items[1].path"), where Kubernetes leaves it out, so the
// error names the item.

const fileModeErrorMsg = "must be a number between 0 and 0777 (octal), both inclusive"

// volumeFieldPaths are the fieldRef paths a downwardAPI volume item may
// select (validVolumeDownwardAPIFieldPathExpressions).
var volumeFieldPaths = []string{"metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"}

// downwardFieldLabels are the field labels ConvertDownwardAPIFieldLabel
// knows (pkg/api/v1/pod); a volume then allows only volumeFieldPaths.
var downwardFieldLabels = []string{"metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid",
	"spec.nodeName", "spec.restartPolicy", "spec.serviceAccountName", "spec.schedulerName",
	"status.phase", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"}

// volumeResources are the resources a resourceFieldRef may select.
var volumeResources = []string{"limits.cpu", "limits.ephemeral-storage", "limits.memory", "requests.cpu", "requests.ephemeral-storage", "requests.memory"}

var (
	cpuDivisors    = []string{"1m", "1"}
	memoryDivisors = []string{"1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei"}
)

func fileMode(p *field.Path, m *int32) field.ErrorList {
	if m != nil && (*m > 0o777 || *m < 0) {
		return field.ErrorList{field.Invalid(p, *m, fileModeErrorMsg)}
	}
	return nil
}

// localNonReservedPath is validateLocalNonReservedPath: relative, no ".."
// element, not starting with "..".
func localNonReservedPath(p *field.Path, target string) field.ErrorList {
	var errs field.ErrorList
	if strings.HasPrefix(target, "/") {
		errs = append(errs, field.Invalid(p, target, "must be a relative path"))
	}
	if slices.Contains(strings.Split(target, "/"), "..") {
		errs = append(errs, field.Invalid(p, target, "must not contain '..'"))
	}
	if strings.HasPrefix(target, "..") && !strings.HasPrefix(target, "../") {
		errs = append(errs, field.Invalid(p, target, "must not start with '..'"))
	}
	return errs
}

func validateDownwardAPIVolume(p *field.Path, s *corev1.DownwardAPIVolumeSource) field.ErrorList {
	errs := fileMode(p.Child("defaultMode"), s.DefaultMode)
	for i, f := range s.GetItems() {
		errs = append(errs, validateDownwardAPIFile(p.Child("items").Index(i), f)...)
	}
	return errs
}

// validateDownwardAPIFile is validateDownwardAPIVolumeFile.
func validateDownwardAPIFile(p *field.Path, f *corev1.DownwardAPIVolumeFile) field.ErrorList {
	var errs field.ErrorList
	if f.GetPath() == "" {
		errs = append(errs, field.Required(p.Child("path"), ""))
	}
	errs = append(errs, localNonReservedPath(p.Child("path"), f.GetPath())...)
	switch {
	case f.GetFieldRef() != nil:
		errs = append(errs, volumeFieldSelector(p.Child("fieldRef"), f.GetFieldRef().GetFieldPath())...)
		if f.GetResourceFieldRef() != nil {
			errs = append(errs, field.Invalid(p, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
		}
	case f.GetResourceFieldRef() != nil:
		errs = append(errs, resourceSelector(p.Child("resourceFieldRef"), f.GetResourceFieldRef(), true)...)
	default:
		errs = append(errs, field.Required(p, "one of fieldRef and resourceFieldRef is required"))
	}
	return append(errs, fileMode(p.Child("mode"), f.Mode)...)
}

// volumeFieldSelector is validateObjectFieldSelector with the volume's
// expressions.
func volumeFieldSelector(p *field.Path, fp string) field.ErrorList {
	if fp == "" {
		return field.ErrorList{field.Required(p.Child("fieldPath"), "")}
	}
	if path, sub, ok := splitSubscript(fp); ok {
		var msgs []string
		switch path {
		case "metadata.annotations":
			msgs = validation.IsQualifiedName(strings.ToLower(sub))
		case "metadata.labels":
			msgs = validation.IsQualifiedName(sub)
		default:
			return field.ErrorList{field.Invalid(p.Child("fieldPath"), fp, "error converting fieldPath: field label does not support subscript: "+fp)}
		}
		var errs field.ErrorList
		for _, m := range msgs {
			errs = append(errs, field.Invalid(p, sub, m))
		}
		return errs
	}
	if !slices.Contains(downwardFieldLabels, fp) {
		return field.ErrorList{field.Invalid(p.Child("fieldPath"), fp, "error converting fieldPath: field label not supported: "+fp)}
	}
	if !slices.Contains(volumeFieldPaths, fp) {
		return field.ErrorList{field.NotSupported(p.Child("fieldPath"), fp, volumeFieldPaths)}
	}
	return nil
}

// splitSubscript is fieldpath.SplitMaybeSubscriptedPath: "a.b['k']" is
// ("a.b", "k", true).
func splitSubscript(fp string) (string, string, bool) {
	if !strings.HasSuffix(fp, "']") {
		return fp, "", false
	}
	s := strings.TrimSuffix(fp, "']")
	i := strings.Index(s, "['")
	if i < 0 {
		return fp, "", false
	}
	return s[:i], s[i+2:], true
}

// resourceSelector is validateContainerResourceFieldSelector with its
// divisor check: a volume's item must name its container, an env
// variable's may leave it out (its own container).
func resourceSelector(p *field.Path, r *corev1.ResourceFieldSelector, volume bool) field.ErrorList {
	var errs field.ErrorList
	switch {
	case volume && r.GetContainerName() == "":
		errs = append(errs, field.Required(p.Child("containerName"), ""))
	case r.GetResource() == "":
		errs = append(errs, field.Required(p.Child("resource"), ""))
	case !slices.Contains(volumeResources, r.GetResource()) && !hugePages(r.GetResource()):
		errs = append(errs, field.NotSupported(p.Child("resource"), r.GetResource(), volumeResources))
	}
	if r.GetDivisor() == "" {
		return errs
	}
	q, err := resource.ParseQuantity(r.GetDivisor())
	if err != nil {
		return append(errs, field.Invalid(p.Child("divisor"), r.GetDivisor(), "must be a valid quantity, e.g. 100m or 128Mi"))
	}
	if q.IsZero() {
		// Kubernetes' unset divisor: a client-go Pod without one sends
		// "0"; the node divides by 1 (ExtractContainerResourceValue).
		return errs
	}
	valid := func(set []string) bool {
		return slices.ContainsFunc(set, func(s string) bool { return q.Cmp(resource.MustParse(s)) == 0 })
	}
	// As validateContainerResourceDivisor, the value named is the resource.
	res := r.GetResource()
	switch {
	case strings.HasSuffix(res, ".cpu") && !valid(cpuDivisors):
		errs = append(errs, field.Invalid(p.Child("divisor"), res, "only divisor's values 1m and 1 are supported with the cpu resource"))
	case strings.HasSuffix(res, ".memory") && !valid(memoryDivisors):
		errs = append(errs, field.Invalid(p.Child("divisor"), res, "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the memory resource"))
	case strings.HasSuffix(res, ".ephemeral-storage") && !valid(memoryDivisors):
		errs = append(errs, field.Invalid(p.Child("divisor"), res, "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the local ephemeral storage resource"))
	case hugePages(res) && !valid(memoryDivisors):
		errs = append(errs, field.Invalid(p.Child("divisor"), res, "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the hugepages resource"))
	}
	return errs
}

// hugePages reports a limits.hugepages-<size> or requests.hugepages-<size>
// resource, which Kubernetes' resource selectors also allow.
func hugePages(res string) bool {
	return strings.HasPrefix(res, "limits.hugepages-") || strings.HasPrefix(res, "requests.hugepages-")
}

// validateKeyToPath is Kubernetes' validateKeyToPath.
func validateKeyToPath(p *field.Path, kp *corev1.KeyToPath) field.ErrorList {
	var errs field.ErrorList
	if kp.GetKey() == "" {
		errs = append(errs, field.Required(p.Child("key"), ""))
	}
	if kp.GetPath() == "" {
		errs = append(errs, field.Required(p.Child("path"), ""))
	}
	errs = append(errs, localNonReservedPath(p.Child("path"), kp.GetPath())...)
	return append(errs, fileMode(p.Child("mode"), kp.Mode)...)
}

// validateProjectedVolume is validateProjectedVolumeSource: the default
// mode, each source's name and items, a serviceAccountToken's path and
// expirationSeconds (at least 10 minutes), one kind per source, and no
// path projected twice ("conflicting duplicate paths").
func validateProjectedVolume(p *field.Path, s *corev1.ProjectedVolumeSource) field.ErrorList {
	errs := fileMode(p.Child("defaultMode"), s.DefaultMode)
	paths := map[string]bool{}
	dup := func(path, value string) {
		if path == "" {
			return
		}
		if paths[path] {
			errs = append(errs, field.Invalid(p, value, "conflicting duplicate paths"))
		}
		paths[path] = true
	}
	for i, src := range s.GetSources() {
		sp := p.Child("sources").Index(i)
		n := 0
		objectItems := func(kind, name string, items []*corev1.KeyToPath) {
			n++
			kp := sp.Child(kind)
			if name == "" {
				errs = append(errs, field.Required(kp.Child("name"), ""))
			}
			for j, it := range items {
				errs = append(errs, validateKeyToPath(kp.Child("items").Index(j), it)...)
				dup(it.GetPath(), name)
			}
		}
		if c := src.GetSecret(); c != nil {
			objectItems("secret", c.GetName(), c.GetItems())
		}
		if c := src.GetConfigMap(); c != nil {
			objectItems("configMap", c.GetName(), c.GetItems())
		}
		if d := src.GetDownwardApi(); d != nil {
			n++
			for j, f := range d.GetItems() {
				errs = append(errs, validateDownwardAPIFile(sp.Child("downwardAPI", "items").Index(j), f)...)
				dup(f.GetPath(), f.GetPath())
			}
		}
		if t := src.GetServiceAccountToken(); t != nil {
			n++
			tp := sp.Child("serviceAccountToken")
			if e := t.ExpirationSeconds; e != nil { // unset: Kubernetes' default, 3600
				if why := auth.CheckTokenExpiration(*e); why != "" {
					errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *e, why))
				}
			}
			if t.GetPath() == "" {
				errs = append(errs, field.Required(tp.Child("path"), ""))
			}
			if len(t.GetAudience()) > auth.MaxTokenAudienceBytes { // the api stage would refuse every token request
				errs = append(errs, field.TooLong(tp.Child("audience"), "", auth.MaxTokenAudienceBytes))
			}
			errs = append(errs, localNonReservedPath(tp.Child("path"), t.GetPath())...)
			dup(t.GetPath(), t.GetPath())
		}
		if n > 1 {
			errs = append(errs, field.Forbidden(sp, "may not specify more than 1 volume type per source"))
		}
	}
	return errs
}

// objectVolumeItems checks a configMap or secret volume's defaultMode and
// items (validateConfigMapVolumeSource, validateSecretVolumeSource).
func objectVolumeItems(p *field.Path, def *int32, items []*corev1.KeyToPath) field.ErrorList {
	errs := fileMode(p.Child("defaultMode"), def)
	for i, it := range items {
		errs = append(errs, validateKeyToPath(p.Child("items").Index(i), it)...)
	}
	return errs
}
