package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// Output formats, as given to -o.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

func checkFormat(f string) error {
	switch f {
	case formatTable, formatJSON, formatYAML:
		return nil
	}
	return usageErrorf("unknown output format %q: use table, json or yaml", f)
}

// printer writes one command's result in the format the user chose. JSON is
// the API's own protobuf JSON form; YAML is the same document as YAML; the
// table is the command's own human layout.
type printer struct {
	w      io.Writer
	format string
}

// table is a command's human layout, written as tab-separated cells.
type table func(w io.Writer)

// print renders msg. For json and yaml, fields is the protobuf message (or a
// document built from several, see document); for table, the table function.
func (p printer) print(doc document, t table) error {
	switch p.format {
	case formatJSON, formatYAML:
		raw, err := doc.json()
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		// Re-indent: protojson's own spacing is deliberately unstable.
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return fmt.Errorf("format output: %w", err)
		}
		if p.format == formatYAML {
			y, err := yaml.JSONToYAML(buf.Bytes())
			if err != nil {
				return fmt.Errorf("format output: %w", err)
			}
			_, err = p.w.Write(y)
			return err
		}
		buf.WriteByte('\n')
		_, err = p.w.Write(buf.Bytes())
		return err
	default:
		tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
		t(tw)
		return tw.Flush()
	}
}

// document is the machine-readable form of a result: one protobuf message,
// or an object whose members are messages.
type document struct {
	msg     proto.Message
	members []member // used when msg is nil
}

type member struct {
	name string
	msg  proto.Message // nil encodes as null
}

func docOf(m proto.Message) document { return document{msg: m} }

var marshalOpts = protojson.MarshalOptions{EmitUnpopulated: true}

func (d document) json() ([]byte, error) {
	if d.msg != nil {
		b, err := marshalOpts.Marshal(d.msg)
		if err != nil {
			return nil, fmt.Errorf("format output: %w", err)
		}
		return b, nil
	}
	obj := make(map[string]json.RawMessage, len(d.members))
	for _, m := range d.members {
		if m.msg == nil {
			obj[m.name] = json.RawMessage("null")
			continue
		}
		b, err := marshalOpts.Marshal(m.msg)
		if err != nil {
			return nil, fmt.Errorf("format output: %w", err)
		}
		obj[m.name] = b
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("format output: %w", err)
	}
	return b, nil
}
