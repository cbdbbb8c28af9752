package api

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// maxRequestBytes bounds one API request message, after decompression:
// the largest field a request carries is a policy document (64 KiB), and
// Connect decodes the whole message before the authorizer runs, so without
// a bound a caller with no token could make the server allocate gigabytes.
const maxRequestBytes = 1 << 20

// maxRequestString bounds every string in a request except those in
// requestStringLimits: names, ids, filters and free text are all far
// shorter, and an id echoed back in a not_found answer and the audit log
// must stay short.
const maxRequestString = 4 << 10

// requestStringLimits are the string fields, by name, whose bound differs
// from maxRequestString.
var requestStringLimits = map[protoreflect.Name]int{
	"body":            maxPolicyBytes, // a policy document; its validator says more
	"idempotency_key": 128,
}

// checkRequest refuses, in one line naming the field, what no handler
// should ever see and what the store engines would not take alike: a
// string with a NUL byte (PostgreSQL's text refuses it, SQLite keeps it),
// an oversized string, and a time or duration outside what protobuf
// defines (years 1 to 9999; beyond them the engines overflow or refuse
// differently). Protobuf itself has refused strings that are not UTF-8.
// Every request passes here, so no handler has to remember.
func checkRequest(m protoreflect.Message) error {
	return checkMessage(m, "")
}

// checkMessage checks m, found at path ("" for the request itself).
func checkMessage(m protoreflect.Message, path string) error {
	switch v := m.Interface().(type) {
	case *timestamppb.Timestamp:
		if err := v.CheckValid(); err != nil {
			return fmt.Errorf("%s is not a time between the years 1 and 9999: send an RFC 3339 time in that range", path)
		}
		return nil
	case *durationpb.Duration:
		if err := v.CheckValid(); err != nil {
			return fmt.Errorf("%s is not a valid duration (at most 10,000 years either way)", path)
		}
		return nil
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		if path != "" {
			name = path + "." + name
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = checkValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", name, i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				key := k.String()
				if err = checkString(fd.MapKey(), key, name+" key "+quoteShort(key)); err == nil {
					err = checkValue(fd.MapValue(), mv, name+"["+quoteShort(key)+"]")
				}
				return err == nil
			})
		default:
			err = checkValue(fd, v, name)
		}
		return err == nil
	})
	return err
}

func checkValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, name string) error {
	switch {
	case fd.Kind() == protoreflect.StringKind:
		return checkString(fd, v.String(), name)
	case fd.Message() != nil:
		return checkMessage(v.Message(), name)
	}
	return nil
}

func checkString(fd protoreflect.FieldDescriptor, s, name string) error {
	if fd.Kind() != protoreflect.StringKind {
		return nil
	}
	limit, ok := requestStringLimits[fd.Name()]
	if !ok {
		limit = maxRequestString
	}
	switch {
	case len(s) > limit:
		return fmt.Errorf("%s is %d bytes long; the limit is %d", name, len(s), limit)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s holds a NUL byte: remove it", name)
	}
	return nil
}

// quoteShort quotes a map key for an error message, cut so that a huge key
// does not make a huge message.
func quoteShort(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q...", s[:64])
	}
	return fmt.Sprintf("%q", s)
}
