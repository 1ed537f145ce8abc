// Package floors holds the test that docs/architecture.md's "Floors" are
// true of the tree: every package stands on exactly one floor, every
// name the list gives is a package, and no package imports one on a
// higher floor. It has no code of its own and nothing imports it.
package floors
