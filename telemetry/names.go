package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/claimbus/claimbus/internal/observe"
)

// names is what Telemetry keeps per command name, so that a command
// builds no span name nor attribute set of its own.
type names struct {
	span    string
	outcome map[string][]metric.RecordOption // by outcome: name and outcome
	name    attribute.KeyValue
	hold    []metric.RecordOption // the command's name
	// rejections are the options of the rejections counter, by code and
	// field.
	rejections sync.Map // rejectionKey → []metric.AddOption
}

// recordOptions and addOptions are the attributes of a measurement as a
// ready-made option slice: a variadic slice built per call escapes and
// allocates.
func recordOptions(kv ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

func addOptions(kv ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

type rejectionKey struct{ code, field string }

// namesOf returns the names of command name, made on first use.
func (t *Telemetry) namesOf(name string) *names {
	if n, ok := t.names.Load(name); ok {
		return n.(*names)
	}
	n := &names{span: "handle " + name, name: attrCommandName.String(name), outcome: make(map[string][]metric.RecordOption, 3)}
	n.hold = recordOptions(n.name)
	for _, o := range []string{outcomeOK, outcomeRejected, outcomeError} {
		n.outcome[o] = recordOptions(n.name, attrOutcome.String(o))
	}
	v, _ := t.names.LoadOrStore(name, n)
	return v.(*names)
}

// rejection returns the attributes of a rejection with code and field.
func (n *names) rejection(code, field string) []metric.AddOption {
	k := rejectionKey{code, field}
	if o, ok := n.rejections.Load(k); ok {
		return o.([]metric.AddOption)
	}
	o := addOptions(n.name, attrRejectionCode.String(code), attrRejectionField.String(field))
	v, _ := n.rejections.LoadOrStore(k, o)
	return v.([]metric.AddOption)
}

// stepOptions are the ready options of one step and detail: its span's
// start options and, for a claim wait, the histogram's attributes when it
// succeeded ([0]) and failed ([1]).
type stepOptions struct {
	start []trace.SpanStartOption
	wait  [2][]metric.RecordOption
}

type stepKey struct{ step, detail string }

// stepOptionsOf returns the options of step with detail, made on first use.
func (t *Telemetry) stepOptionsOf(step, detail string) *stepOptions {
	k := stepKey{step, detail}
	if o, ok := t.steps.Load(k); ok {
		return o.(*stepOptions)
	}
	attr := attrField.String(detail)
	if step == observe.StepLock || step == observe.StepSerialize {
		attr = attrKeyNamespace.String(detail)
	}
	o := &stepOptions{start: []trace.SpanStartOption{trace.WithAttributes(attr)}}
	for i, failed := range []bool{false, true} {
		o.wait[i] = recordOptions(attr, attrStepFailed.Bool(failed))
	}
	v, _ := t.steps.LoadOrStore(k, o)
	return v.(*stepOptions)
}
