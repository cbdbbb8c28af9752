package api

import (
	"github.com/better-compute/better-compute/internal/iam"
)

// The Cedar entity types the API names. They match the schema in
// internal/iam, which a test checks against every method's option.
const (
	typeSystem         = "System"
	typeTenant         = "Tenant"
	typeUser           = "User"
	typeServiceAccount = "ServiceAccount"
	typeGroup          = "Group"
	typeToken          = "Token"
	typePolicy         = "Policy"
	typeNode           = "Node"
	typeJoinToken      = "JoinToken"
	typePool           = "Pool"
	typeReservation    = "Reservation"
	typeWebhook        = "Webhook"
)

// resourceFor builds the resource of the given type, tenant and id.
func resourceFor(typ, tenant, id string) iam.Resource {
	return iam.Resource{Type: typ, Tenant: tenant, ID: id}
}
