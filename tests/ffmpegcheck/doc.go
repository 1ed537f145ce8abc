// Package ffmpegcheck is how the tests run Debian's ffmpeg's OpenCL
// filters (issue 45): the filters, ffmpeg's arguments, and the reading of
// its framemd5 output, shared by the host test (tests/icdhost, through the
// ICD against an in-process vgpud) and the guest test (tests, in a real
// QEMU guest), whose reference is ffmpeg on the host's PoCL. It knows
// ffmpeg's command line and nothing of vgpud.
package ffmpegcheck
