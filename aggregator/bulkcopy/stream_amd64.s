#include "textflag.h"

// func streamBlocks(dst, src *byte, blocks uintptr)
// Four pages at a time: line i of each of the four, then line i+1.
TEXT ·streamBlocks(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ blocks+16(FP), CX
block:
	MOVQ $64, DX
line:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 4096(SI), Y2
	VMOVDQU 4128(SI), Y3
	VMOVDQU 8192(SI), Y4
	VMOVDQU 8224(SI), Y5
	VMOVDQU 12288(SI), Y6
	VMOVDQU 12320(SI), Y7
	VMOVNTDQ Y0, 0(DI)
	VMOVNTDQ Y1, 32(DI)
	VMOVNTDQ Y2, 4096(DI)
	VMOVNTDQ Y3, 4128(DI)
	VMOVNTDQ Y4, 8192(DI)
	VMOVNTDQ Y5, 8224(DI)
	VMOVNTDQ Y6, 12288(DI)
	VMOVNTDQ Y7, 12320(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ DX
	JNZ line
	ADDQ $12288, SI
	ADDQ $12288, DI
	DECQ CX
	JNZ block
	SFENCE
	VZEROUPPER
	RET

// func streamLines(dst, src *byte, lines uintptr)
TEXT ·streamLines(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lines+16(FP), CX
loop:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVNTDQ Y0, 0(DI)
	VMOVNTDQ Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ loop
	SFENCE
	VZEROUPPER
	RET
