package main

import "github.com/vgpud/vgpud/bench/rodinia"

// kernelSource: the Rodinia-style kernels.
const kernelSource = rodinia.Source
