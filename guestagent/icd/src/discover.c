/* discover.c: finding the vGPUs. When vgpu-icdd answers on its socket
 * (VGPUD_ICD_SOCKET, or /run/vgpud/icd.sock), the devices are those of its
 * Hello reply, in its order. Otherwise, for the queries only (no context
 * can be created without the daemon), like guestagent/driver
 * (pci_linux.go), the ICD lists the PCI functions in sysfs whose vendor, device and class are
 * the vGPU's (vgpu_abi.h), in bus-address order, enables each, maps its BAR0
 * read-only and checks the ID register and the ABI major version. A
 * function that fails a check is skipped with one line on stderr. The
 * registers the queries need are read once, here: each trapped register
 * read is a round trip to vgpud (docs/ABI.md "Performance guidance").
 *
 * VGPUD_ICD_SYSFS replaces /sys/bus/pci/devices. It is a test hook: the
 * tests point it at a fake tree whose resource0 files are regular 4 KiB
 * files holding a register image. It is read with secure_getenv, so a
 * set-user-ID program never honours it. */
#define _GNU_SOURCE
#include "icd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SYSFS_PCI "/sys/bus/pci/devices"

static struct _cl_device_id devices[VGPU_MAX_DEVICES];
static cl_uint ndevices;
static pthread_once_t discovered = PTHREAD_ONCE_INIT;

/* sysfs_hex reads a "0x..." sysfs attribute; -1 when absent or malformed. */
static long long sysfs_hex(const char *dir, const char *attr)
{
	char path[600], buf[64];
	if (snprintf(path, sizeof path, "%s/%s", dir, attr) >= (int)sizeof path)
		return -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *end;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 16);
	if (errno != 0 || end == buf || v > 0xffffffffull)
		return -1;
	while (*end == '\n' || *end == ' ' || *end == '\t')
		end++;
	return *end == '\0' ? (long long)v : -1;
}

/* enable sets the function's memory-space enable through sysfs. Only root
 * may; for anyone else the write fails with EACCES and the function is used
 * if it is enabled already (the ID check below tells). */
static int enable(const char *dir, const char *bdf)
{
	char path[600];
	snprintf(path, sizeof path, "%s/enable", dir);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int err = 0;
	if (fd < 0) {
		err = errno;
	} else {
		if (write(fd, "1", 1) != 1)
			err = errno;
		close(fd);
	}
	if (err == 0 || err == EACCES || err == EPERM || err == EROFS)
		return 0;
	vgpu_log("skipping %s: enable: %s", bdf, strerror(err));
	return -1;
}

/* copy_name reads a NUL-padded name register of len bytes into out (len+1
 * bytes), with 32-bit loads; control characters become '?'. */
static void copy_name(const volatile uint32_t *regs, uint32_t off, size_t len, char *out)
{
	for (size_t i = 0; i < len; i += 4) {
		uint32_t w = regs[(off + i) / 4];
		for (size_t j = 0; j < 4 && i + j < len; j++)
			out[i + j] = (char)(w >> (8 * j));
	}
	out[len] = '\0';
	for (char *p = out; *p != '\0'; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
			*p = '?';
}

static uint64_t reg64(const volatile uint32_t *regs, uint32_t lo, uint32_t hi)
{
	return (uint64_t)regs[lo / 4] | (uint64_t)regs[hi / 4] << 32;
}

/* probe maps the BAR0 of the function at dir and fills dev from it; 0 when
 * the function is a vGPU this ICD can drive. */
static int probe(const char *dir, const char *bdf, struct _cl_device_id *dev)
{
	if (enable(dir, bdf) != 0)
		return -1;
	char path[600];
	snprintf(path, sizeof path, "%s/resource0", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		vgpu_log("skipping %s: open %s: %s", bdf, path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		vgpu_log("skipping %s: stat %s: %s", bdf, path, strerror(errno));
		close(fd);
		return -1;
	}
	if (st.st_size < VGPU_BAR0_SIZE) {
		vgpu_log("skipping %s: %s is %lld bytes, want %d", bdf, path, (long long)st.st_size, VGPU_BAR0_SIZE);
		close(fd);
		return -1;
	}
	void *map = mmap(NULL, VGPU_BAR0_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	int err = errno;
	close(fd);
	if (map == MAP_FAILED) {
		vgpu_log("skipping %s: mmap %s: %s", bdf, path, strerror(err));
		return -1;
	}
	const volatile uint32_t *regs = map;
	int ok = -1;
	uint32_t id = regs[VGPU_REG_ID / 4];
	uint32_t version = regs[VGPU_REG_VERSION / 4];
	if (id != VGPU_ID_MAGIC) {
		vgpu_log("skipping %s: ID register reads 0x%08x, want 0x%08x%s", bdf, id, VGPU_ID_MAGIC,
			 id == 0xffffffffu ? " (memory space disabled? enabling it needs root)" : "");
	} else if (version >> 16 != VGPU_VERSION_MAJOR) {
		vgpu_log("skipping %s: ABI version %u.%u, this ICD drives %u.x", bdf, version >> 16, version & 0xffff,
			 VGPU_VERSION_MAJOR);
	} else {
		memset(dev, 0, sizeof *dev);
		dev->dispatch = &vgpu_dispatch;
		snprintf(dev->sysfs, sizeof dev->sysfs, "%s", dir);
		snprintf(dev->bdf, sizeof dev->bdf, "%s", bdf);
		dev->version = version;
		dev->features = regs[VGPU_REG_FEATURES / 4];
		dev->mem_size = reg64(regs, VGPU_REG_MEM_SIZE_LO, VGPU_REG_MEM_SIZE_HI);
		dev->max_alloc = reg64(regs, VGPU_REG_MAX_ALLOC_LO, VGPU_REG_MAX_ALLOC_HI);
		dev->compute_units = regs[VGPU_REG_COMPUTE_UNITS / 4];
		dev->max_work_group = regs[VGPU_REG_MAX_WORK_GROUP / 4];
		dev->max_ring_slots = regs[VGPU_REG_MAX_RING_SLOTS / 4];
		copy_name(regs, VGPU_REG_PROFILE_NAME, VGPU_PROFILE_NAME_LEN, dev->profile);
		copy_name(regs, VGPU_REG_DEVICE_NAME, VGPU_DEVICE_NAME_LEN, dev->name);
		ok = 0;
	}
	munmap(map, VGPU_BAR0_SIZE);
	return ok;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void discover(void)
{
	/* vgpu-icdd first: its devices are the ones that can run anything. */
	int nd = vgpu_conn_discover(devices, VGPU_MAX_DEVICES);
	if (nd >= 0) {
		ndevices = (cl_uint)nd;
		return;
	}
	const char *root = secure_getenv("VGPUD_ICD_SYSFS");
	if (root == NULL || root[0] == '\0')
		root = SYSFS_PCI;
	DIR *d = opendir(root);
	if (d == NULL) {
		if (errno != ENOENT || strcmp(root, SYSFS_PCI) != 0)
			vgpu_log("no devices: open %s: %s", root, strerror(errno));
		return;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 64;
			char **nn = realloc(names, ncap * sizeof *nn);
			if (nn == NULL)
				break;
			names = nn;
			cap = ncap;
		}
		if ((names[n] = strdup(e->d_name)) == NULL)
			break;
		n++;
	}
	closedir(d);
	if (n > 0)
		qsort(names, n, sizeof *names, by_name);
	for (size_t i = 0; i < n; i++) {
		char dir[sizeof devices[0].sysfs];
		if (snprintf(dir, sizeof dir, "%s/%s", root, names[i]) >= (int)sizeof dir)
			continue;
		if (sysfs_hex(dir, "vendor") != VGPU_VENDOR_ID || sysfs_hex(dir, "device") != VGPU_DEVICE_ID ||
		    sysfs_hex(dir, "class") != VGPU_CLASS_CODE)
			continue;
		if (ndevices == VGPU_MAX_DEVICES) {
			vgpu_log("skipping %s: more than %d vGPUs", names[i], VGPU_MAX_DEVICES);
			continue;
		}
		if (probe(dir, names[i], &devices[ndevices]) == 0)
			ndevices++;
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

cl_uint vgpu_devices(struct _cl_device_id **list)
{
	pthread_once(&discovered, discover);
	*list = devices;
	return ndevices;
}

int vgpu_device_valid(cl_device_id d)
{
	pthread_once(&discovered, discover);
	uintptr_t p = (uintptr_t)d, base = (uintptr_t)devices;
	return p >= base && p < base + ndevices * sizeof devices[0] && (p - base) % sizeof devices[0] == 0;
}
