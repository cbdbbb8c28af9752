package iam

import (
	_ "embed"
	"fmt"
	"slices"

	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"
)

//go:embed schema.cedarschema
var schemaText string

// Schema returns the Cedar schema, in Cedar's human-readable schema syntax,
// that every policy is validated against and every request is shaped by.
// It is compiled into the binary: a policy's meaning must not depend on
// anything but the binary and the policy.
func Schema() string { return schemaText }

// Entity types the engine builds entities for itself. The schema names them
// too; a test keeps the two in step.
const (
	typeTenant         = types.EntityType("Tenant")
	typeGroup          = types.EntityType("Group")
	typeUser           = types.EntityType("User")
	typeServiceAccount = types.EntityType("ServiceAccount")
	typeSystem         = types.EntityType("System")
	typePool           = types.EntityType("Pool")
	typeAction         = types.EntityType("Action")
)

// systemID is the id of the one System entity, the deployment.
const systemID = "deployment"

// compiledSchema is the schema in the forms the package uses: resolved for
// the validator, and indexed for the engine's checks on requests. It is
// read-only after init, so it is shared by every goroutine without locks.
type compiledSchema struct {
	validator *validate.Validator
	// actions maps each action to the principal and resource types it
	// applies to.
	actions map[types.EntityUID]appliesTo
	// attrs maps each entity type to the names of its attributes.
	attrs map[types.EntityType]map[string]bool
	// contexts maps each action to the names of its context attributes.
	contexts map[types.EntityUID]map[string]bool
	// actionNames and typeNames are sorted, for suggestions in messages.
	actionNames, typeNames []string
}

type appliesTo struct {
	principals, resources map[types.EntityType]bool
}

// cschema is the compiled schema. The schema is compiled into the binary, so
// failing to load it is a build defect: init panics, and every test fails.
var cschema = mustCompileSchema(schemaText)

func mustCompileSchema(text string) *compiledSchema {
	cs, err := compileSchema(text)
	if err != nil {
		panic(fmt.Sprintf("iam: the embedded Cedar schema is broken: %v", err))
	}
	return cs
}

func compileSchema(text string) (*compiledSchema, error) {
	var s schema.Schema
	s.SetFilename("schema.cedarschema")
	if err := s.UnmarshalCedar([]byte(text)); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	r, err := s.Resolve()
	if err != nil {
		return nil, fmt.Errorf("resolve: %w", err)
	}
	cs := &compiledSchema{
		validator: validate.New(r, validate.WithStrict()),
		actions:   make(map[types.EntityUID]appliesTo, len(r.Actions)),
		attrs:     make(map[types.EntityType]map[string]bool, len(r.Entities)),
		contexts:  make(map[types.EntityUID]map[string]bool, len(r.Actions)),
	}
	for uid, a := range r.Actions {
		at := appliesTo{principals: map[types.EntityType]bool{}, resources: map[types.EntityType]bool{}}
		ctx := map[string]bool{}
		if a.AppliesTo != nil {
			for k := range a.AppliesTo.Context {
				ctx[string(k)] = true
			}
			for _, t := range a.AppliesTo.Principals {
				at.principals[t] = true
			}
			for _, t := range a.AppliesTo.Resources {
				at.resources[t] = true
			}
		}
		cs.actions[uid] = at
		cs.contexts[uid] = ctx
		cs.actionNames = append(cs.actionNames, string(uid.ID))
	}
	for name, e := range r.Entities {
		attrs := make(map[string]bool, len(e.Shape))
		for k := range e.Shape {
			attrs[string(k)] = true
		}
		cs.attrs[name] = attrs
		cs.typeNames = append(cs.typeNames, string(name))
	}
	slices.Sort(cs.actionNames)
	slices.Sort(cs.typeNames)
	return cs, nil
}

// hasAttr reports whether entities of type t carry attribute name.
func (cs *compiledSchema) hasAttr(t types.EntityType, name string) bool {
	return cs.attrs[t][name]
}

// Actions returns the name of every action in the schema, sorted, such as
// "compute:reservations:create".
func Actions() []string { return slices.Clone(cschema.actionNames) }

// ActionAppliesTo returns the principal and resource entity types the schema
// declares for action, sorted, and whether the action exists. The API's
// tests use it to check each method's declared resource type.
func ActionAppliesTo(action string) (principals, resources []string, ok bool) {
	at, ok := cschema.actions[types.NewEntityUID(typeAction, types.String(action))]
	if !ok {
		return nil, nil, false
	}
	for t := range at.principals {
		principals = append(principals, string(t))
	}
	for t := range at.resources {
		resources = append(resources, string(t))
	}
	slices.Sort(principals)
	slices.Sort(resources)
	return principals, resources, true
}
