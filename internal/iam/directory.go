package iam

import (
	"fmt"

	"github.com/cedar-policy/cedar-go/types"
)

// Directory is the authorization-relevant state of the deployment at one
// epoch: what the engine needs besides the request to decide a call.
// Principals appear only through their memberships: a principal with no
// group is still `in` its tenant, which the engine knows from the request.
type Directory struct {
	// Epoch is the store's authorization epoch the rows were read at (or
	// after: a directory may be newer than its epoch, never older).
	Epoch int64
	// Tenants are every tenant; exactly one should be the platform.
	Tenants []DirTenant
	// Members are every group membership.
	Members []DirMember
	// Policies are every policy document of every tenant.
	Policies []DirPolicy
}

// DirTenant is one tenant of a Directory.
type DirTenant struct {
	// Name is the tenant's name.
	Name string
	// Platform marks the fleet operator's tenant, whose policies apply to
	// every call.
	Platform bool
}

// DirMember is one group membership of a Directory.
type DirMember struct {
	// Tenant is the tenant of both the group and the member.
	Tenant string
	// Group is the group's name.
	Group string
	// Member is the user's or service account's name.
	Member string
}

// DirPolicy is one policy document of a Directory.
type DirPolicy struct {
	// Tenant is the policy's tenant.
	Tenant string
	// Name is the policy's name, unique in its tenant.
	Name string
	// Body is the Cedar source: any number of permit and forbid statements.
	Body string
}

// member is what the engine knows of a principal that is in some group.
type member struct {
	parents types.EntityUIDSet // its groups and its tenant
	attrs   types.Record       // tenant and name
}

// entities is the directory's part of the entity store, prepared once per
// engine so that deciding a call allocates little: every entity a decision
// usually walks (the principal, its groups, its tenant) is built here.
type entities struct {
	tenants     map[string]types.Entity // by tenant name
	tenantOnly  map[string]types.EntityUIDSet
	groups      map[types.EntityUID]types.Entity
	members     map[string]member // by "tenant/name"
	platform    string            // the platform tenant's name; "" if none
	platformErr error             // set when the directory names two platforms
}

func tenantUID(name string) types.EntityUID {
	return types.NewEntityUID(typeTenant, types.String(name))
}

func scopedUID(t types.EntityType, tenant, id string) types.EntityUID {
	return types.NewEntityUID(t, types.String(tenant+"/"+id))
}

func newEntities(d Directory) entities {
	es := entities{
		tenants:    make(map[string]types.Entity, len(d.Tenants)),
		tenantOnly: make(map[string]types.EntityUIDSet, len(d.Tenants)),
		groups:     make(map[types.EntityUID]types.Entity),
		members:    make(map[string]member),
	}
	for _, t := range d.Tenants {
		es.tenants[t.Name] = tenantEntity(t.Name, t.Platform)
		es.tenantOnly[t.Name] = types.NewEntityUIDSet(tenantUID(t.Name))
		if t.Platform {
			if es.platform != "" && es.platform != t.Name {
				// The store allows one platform tenant; should two ever
				// appear, neither is trusted more than the other by
				// accident: the first by name wins and the engine says so.
				es.platformErr = fmt.Errorf("iam: two platform tenants, %q and %q; using %q", es.platform, t.Name, min(es.platform, t.Name))
				es.platform = min(es.platform, t.Name)
				continue
			}
			es.platform = t.Name
		}
	}
	groupsOf := make(map[string][]types.EntityUID)
	for _, m := range d.Members {
		g := scopedUID(typeGroup, m.Tenant, m.Group)
		if _, ok := es.groups[g]; !ok {
			es.groups[g] = scopedEntity(typeGroup, m.Tenant, m.Group)
		}
		k := m.Tenant + "/" + m.Member
		groupsOf[k] = append(groupsOf[k], g)
	}
	for k, gs := range groupsOf {
		tenant, name := splitScoped(k)
		parents := append(gs, tenantUID(tenant))
		es.members[k] = member{
			parents: types.NewEntityUIDSet(parents...),
			attrs:   types.NewRecord(types.RecordMap{"tenant": tenantUID(tenant), "name": types.String(name)}),
		}
	}
	return es
}

func tenantEntity(name string, platform bool) types.Entity {
	return types.Entity{
		UID:        tenantUID(name),
		Attributes: types.NewRecord(types.RecordMap{"name": types.String(name), "platform": types.Boolean(platform)}),
	}
}

// scopedEntity builds an entity of a tenant-scoped type from its id alone:
// parent the tenant, attributes tenant and (for types that have one) name.
// It is what a name says about an object; attributes only the object's
// owner knows (a Pool's offeredTo) are left out.
func scopedEntity(t types.EntityType, tenant, id string) types.Entity {
	return types.Entity{
		UID:        scopedUID(t, tenant, id),
		Parents:    types.NewEntityUIDSet(tenantUID(tenant)),
		Attributes: types.NewRecord(scopedAttrs(t, tenant, id, 0)),
	}
}

// scopedAttrs returns the attributes an id of type t says: tenant, and name
// for the types that have one; room says how many more the caller adds.
func scopedAttrs(t types.EntityType, tenant, id string, room int) types.RecordMap {
	rec := make(types.RecordMap, 2+room)
	if cschema.hasAttr(t, "tenant") {
		rec["tenant"] = tenantUID(tenant)
	}
	if cschema.hasAttr(t, "name") {
		rec["name"] = types.String(id)
	}
	return rec
}

// splitScoped splits "tenant/rest" at the first slash; tenant names have
// none.
func splitScoped(id string) (tenant, rest string) {
	for i := range len(id) {
		if id[i] == '/' {
			return id[:i], id[i+1:]
		}
	}
	return "", id
}

// get returns the directory's entity for uid. Entities the directory does
// not hold are derived from their id when their tenant exists (a group with
// no members, a principal in no group, a Pool named as a parent), since
// everything the engine derives (tenant, name, the tenant parent) follows
// from the id.
func (es *entities) get(uid types.EntityUID) (types.Entity, bool) {
	switch uid.Type {
	case typeTenant:
		e, ok := es.tenants[string(uid.ID)]
		return e, ok
	case typeSystem:
		if uid.ID == systemID {
			return types.Entity{UID: uid}, true
		}
		return types.Entity{}, false
	case typeGroup:
		if e, ok := es.groups[uid]; ok {
			return e, true
		}
	case typeUser, typeServiceAccount:
		if m, ok := es.members[string(uid.ID)]; ok {
			return types.Entity{UID: uid, Parents: m.parents, Attributes: m.attrs}, true
		}
	}
	if _, ok := cschema.attrs[uid.Type]; !ok {
		return types.Entity{}, false // an action or an unknown type: no entity
	}
	tenant, id := splitScoped(string(uid.ID))
	if _, ok := es.tenants[tenant]; !ok || id == "" {
		return types.Entity{}, false
	}
	return scopedEntity(uid.Type, tenant, id), true
}
