package v1alpha1

import (
	"bytes"
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DurationPattern is the form every duration field accepts at admission: a non-negative Go
// duration written with units ("10s", "500ms", "1m30s") or "0". The CRD's rules repeat it
// literally (markers cannot reference a constant); Validate uses it through Duration.Valid.
const DurationPattern = `^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$`

// Duration is a metav1.Duration (a Go duration string on the wire, the same CRD schema) whose
// decoding never fails. An object stored before its CRD refused a bad value (or written past
// admission) must not break a typed List or Watch for every other object of its kind: a
// metav1.Duration would fail the whole List with `time: invalid duration "soon"`, and the
// manager's cache would never sync. Such a value decodes to zero, keeps its raw text (so that
// an update writes it back unchanged) and is reported by Invalid; the controllers' Validate
// turns it into a condition naming the field.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$')",message="must be a non-negative duration with units, like 10s, 500ms or 1m30s"

type Duration struct {
	time.Duration `json:"-"`

	// raw is the JSON text of a value that did not parse; empty when the value is valid.
	raw string
}

// D returns a valid Duration of d, for code that builds objects.
func D(d time.Duration) Duration { return Duration{Duration: d} }

// DP returns a pointer to a valid Duration of d.
func DP(d time.Duration) *Duration { return &Duration{Duration: d} }

// Invalid returns the raw text of a value that did not decode, or "" when the value is valid.
func (d Duration) Invalid() string { return d.raw }

// UnmarshalJSON accepts a Go duration string; anything else is kept as raw text and marked
// invalid instead of failing the decode (see the type's comment).
func (d *Duration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	*d = Duration{}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		d.raw = string(b)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.raw = string(b)
		return nil
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration as metav1.Duration does, or an invalid value as it was read.
func (d Duration) MarshalJSON() ([]byte, error) {
	if d.raw != "" {
		return []byte(d.raw), nil
	}
	return json.Marshal(d.Duration.String())
}

// String returns the duration, or the raw text of an invalid value.
func (d Duration) String() string {
	if d.raw != "" {
		return d.raw
	}
	return d.Duration.String()
}

// NotADuration is the message for a stored value that did not decode as a duration.
const NotADuration = "is not a duration: write it with units, like 10s, 500ms or 1m30s"

// ValidateForm returns an error at p when d holds a value that did not decode (nil and valid
// values pass). Range checks stay with each field's owner, which knows its bounds.
func (d *Duration) ValidateForm(p *field.Path) field.ErrorList {
	if d == nil || d.raw == "" {
		return nil
	}
	var shown any = d.raw
	var s string
	if json.Unmarshal([]byte(d.raw), &s) == nil {
		shown = s
	}
	return field.ErrorList{field.Invalid(p, shown, NotADuration)}
}

// Meta returns d as a *metav1.Duration for schemas that use that type (nil stays nil). Call it
// only on a value Validate accepted: an invalid value converts to zero.
func (d *Duration) Meta() *metav1.Duration {
	if d == nil {
		return nil
	}
	return &metav1.Duration{Duration: d.Duration}
}
