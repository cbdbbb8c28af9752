// Package policies holds the example Cedar policies shipped with Better
// Compute, written for a tenant named acme. They are embedded so that the
// policies the server installs by itself (tenant-admins in every new tenant,
// platform-admins in the platform tenant) are these very files: see
// iam.TenantAdminsPolicy and iam.PlatformAdminsPolicy.
package policies

import "embed"

// Files holds every example, as NAME.cedar.
//
//go:embed *.cedar
var Files embed.FS
