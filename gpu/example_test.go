//go:build cgo

package gpu_test

import (
	"encoding/binary"
	"fmt"
	"log"

	"github.com/vgpud/vgpud/gpu"
)

func ExampleOpen() {
	dev, err := gpu.Open("") // or an index ("1") or a name ("pthread")
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	q, err := dev.NewQueue()
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close() // releases the buffers, programs and kernels below

	prog, buildLog, err := q.Build(`__kernel void twice(__global int *v, int add) {
		size_t i = get_global_id(0);
		v[i] = 2 * v[i] + add;
	}`, "")
	if err != nil {
		log.Fatalf("%v\n%s", err, buildLog)
	}
	k, err := prog.Kernel("twice")
	if err != nil {
		log.Fatal(err)
	}
	buf, err := q.Alloc(4 * 4)
	if err != nil {
		log.Fatal(err)
	}
	data := make([]byte, 16)
	for i := range 4 {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(i))
	}
	if err := q.Write(buf, 0, data); err != nil {
		log.Fatal(err)
	}
	add := binary.LittleEndian.AppendUint32(nil, 1)
	r := gpu.NDRange{Dims: 1, Global: [3]uint64{4}}
	if _, err := q.Launch(k, r, []gpu.Arg{{Buffer: buf}, {Scalar: add}}); err != nil {
		log.Fatal(err)
	}
	if err := q.Read(buf, 0, data); err != nil {
		log.Fatal(err)
	}
	for i := range 4 {
		fmt.Print(binary.LittleEndian.Uint32(data[4*i:]), " ")
	}
	fmt.Println()
	// Output: 1 3 5 7
}
