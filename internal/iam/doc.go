// Package iam is identity and authorization: API tokens, the Cedar schema
// every policy is written against, policy validation, the engine that decides
// a call, and the decision cache in front of it.
//
// The engine never touches the store. It is built from a Directory, the
// authorization-relevant rows at one epoch (tenants, group memberships,
// policies), and is immutable once built, so any number of goroutines may
// share one. The store-backed loader is LoadDirectory; the Authorizer holds
// the current engine and swaps in a new one when the store's authorization
// epoch moves past it.
//
// A call by a principal of tenant T is decided by the platform tenant's
// policies together with T's own, never another tenant's. Deny is the
// default and forbid wins, as in Cedar; beyond Cedar, a forbid statement that
// fails to evaluate also denies (fail closed), where Cedar would skip it.
package iam
