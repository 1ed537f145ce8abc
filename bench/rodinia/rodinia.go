// Package rodinia holds the OpenCL C source of the Rodinia-style kernels
// (after the benchmarks GRU used) that vgpud's benchmarks run: madd, mmul,
// srad, backprop, hotspot, lud and lud_col. It knows nothing else.
package rodinia

// Source is the kernels' OpenCL C source.
const Source = `
__kernel void madd(__global const float *a, __global const float *b, __global float *c, int n) {
	int i = get_global_id(0);
	if (i < n) c[i] = a[i] + b[i];
}
__kernel void mmul(__global const float *a, __global const float *b, __global float *c, int n) {
	int row = get_global_id(1), col = get_global_id(0);
	float s = 0.0f;
	for (int k = 0; k < n; k++) s += a[row * n + k] * b[k * n + col];
	c[row * n + col] = s;
}
__kernel void srad(__global const float *img, __global float *out, int rows, int cols, float lambda, float q0) {
	int c = get_global_id(0), r = get_global_id(1);
	int i = r * cols + c;
	float jc = img[i];
	float dn = img[(r > 0 ? r - 1 : 0) * cols + c] - jc;
	float ds = img[(r < rows - 1 ? r + 1 : r) * cols + c] - jc;
	float dw = img[r * cols + (c > 0 ? c - 1 : 0)] - jc;
	float de = img[r * cols + (c < cols - 1 ? c + 1 : c)] - jc;
	float g2 = (dn * dn + ds * ds + dw * dw + de * de) / (jc * jc + 1e-6f);
	float l = (dn + ds + dw + de) / (jc + 1e-6f);
	float num = 0.5f * g2 - 0.0625f * l * l;
	float den = 1.0f + 0.25f * l;
	float q = num / (den * den + 1e-6f);
	float coef = 1.0f / (1.0f + (q - q0) / (q0 * (1.0f + q0)));
	coef = clamp(coef, 0.0f, 1.0f);
	out[i] = jc + 0.25f * lambda * coef * (dn + ds + dw + de);
}
__kernel void backprop(__global const float *input, __global const float *weights, __global float *hidden, int nin, int nhid) {
	int j = get_global_id(0);
	if (j >= nhid) return;
	float s = 0.0f;
	for (int i = 0; i < nin; i++) s += weights[i * nhid + j] * input[i];
	hidden[j] = 1.0f / (1.0f + exp(-s));
}
__kernel void hotspot(__global const float *temp, __global const float *power, __global float *out, int rows, int cols, int steps) {
	int c = get_global_id(0), r = get_global_id(1);
	int i = r * cols + c;
	float t = temp[i];
	for (int s = 0; s < steps; s++) {
		float n = temp[(r > 0 ? r - 1 : r) * cols + c], so = temp[(r < rows - 1 ? r + 1 : r) * cols + c];
		float w = temp[r * cols + (c > 0 ? c - 1 : c)], e = temp[r * cols + (c < cols - 1 ? c + 1 : c)];
		t = t + 0.1f * (power[i] + (n + so - 2.0f * t) * 0.2f + (w + e - 2.0f * t) * 0.2f + (80.0f - t) * 0.01f);
	}
	out[i] = t;
}
__kernel void lud(__global float *m, int n, int k) {
	int j = get_global_id(0) + k + 1, i = get_global_id(1) + k + 1;
	if (i >= n || j >= n) return;
	float piv = m[k * n + k];
	float l = m[i * n + k] / piv;
	m[i * n + j] = m[i * n + j] - l * m[k * n + j];
}
__kernel void lud_col(__global float *m, int n, int k) {
	int i = get_global_id(0) + k + 1;
	if (i < n) m[i * n + k] = m[i * n + k] / m[k * n + k];
}
`
