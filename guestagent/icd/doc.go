// Package icd holds the tests of the vgpud OpenCL ICD, the guest library
// that lets unmodified OpenCL applications use a vgpud virtual GPU through
// the standard ICD loader (issue 11; docs/icd.md).
//
// The directory owns the ICD, which is written in C, not Go: a Go c-shared
// library cannot be unloaded, allows one Go runtime per process and breaks
// fork, and an ICD is dlopened into arbitrary applications.
//
//   - src/: the library's sources, libvgpud-icd.so (make icd builds it
//     into build/icd with its vgpud.icd loader file). They live in a
//     subdirectory because a Go package may not contain C files without
//     cgo.
//   - vgpu_abi.h: the device ABI for C, generated from package abi by
//     abi/cabi (go generate ./...); never edited by hand.
//   - testdata/apitest.c: a C program that calls the ICD through the loader
//     and checks its answers to well-formed and malformed calls.
//
// The tests build the library with gcc, point it at a fake sysfs tree
// (VGPUD_ICD_SYSFS) whose resource0 files hold register images, and run
// the real clinfo and the API test against it.
package icd
