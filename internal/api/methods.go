package api

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// apiPackage is the protobuf package of the public API.
const apiPackage = "bettercompute.api.v1"

// Method is one method of the public API and the permission it declares.
type Method struct {
	// Procedure is the method's HTTP path, "/bettercompute.api.v1.SystemService/GetStatus".
	Procedure string
	// Descriptor is the method's protobuf descriptor.
	Descriptor protoreflect.MethodDescriptor
	// Authorization is the permission declared by the method's option; nil
	// when the method declares none, which the server treats as deny.
	Authorization *apiv1.Authorization
	// Mutating is true unless the method declares no side effects; every
	// call of a mutating method leaves an audit event.
	Mutating bool
}

// LoadMethods reads every method of every service in the public API package
// from the compiled-in descriptors, keyed by procedure. The proto files are the
// registry: a service appears here as soon as its generated code is linked.
func LoadMethods() (map[string]Method, error) {
	methods := make(map[string]Method)
	protoregistry.GlobalFiles.RangeFilesByPackage(apiPackage, func(fd protoreflect.FileDescriptor) bool {
		services := fd.Services()
		for i := range services.Len() {
			sd := services.Get(i)
			ms := sd.Methods()
			for j := range ms.Len() {
				md := ms.Get(j)
				m := Method{
					Procedure:  fmt.Sprintf("/%s/%s", sd.FullName(), md.Name()),
					Descriptor: md,
				}
				opts, _ := md.Options().(*descriptorpb.MethodOptions)
				m.Mutating = opts.GetIdempotencyLevel() != descriptorpb.MethodOptions_NO_SIDE_EFFECTS
				if opts != nil && proto.HasExtension(opts, apiv1.E_Authorization) {
					m.Authorization, _ = proto.GetExtension(opts, apiv1.E_Authorization).(*apiv1.Authorization)
				}
				methods[m.Procedure] = m
			}
		}
		return true
	})
	if len(methods) == 0 {
		return nil, fmt.Errorf("api: no methods registered for package %s", apiPackage)
	}
	return methods, nil
}

// SortedProcedures returns the procedures of methods in order, for stable
// listings and tests.
func SortedProcedures(methods map[string]Method) []string {
	out := make([]string, 0, len(methods))
	for p := range methods {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
