/* An LD_PRELOAD shim that records the file-system calls whose durability matters after a
 * power cut, for tests/integration/test_power_loss.py.
 *
 * Every mkdir/mkdirat, open/openat with O_CREAT, rename/renameat/renameat2 and
 * fsync/fdatasync that succeeds is appended to $SLUICE_FS_TRACE as one line
 *
 *   <seq> <op> <absolute path> [<absolute path>]
 *
 * seq is a global sequence number (one counter shared by every thread, and by every
 * process that appends to the same file: the file is opened O_APPEND and each line is one
 * write(2)). Paths are made absolute with the calling directory fd (or the cwd); an
 * fsync's path is read from /proc/self/fd at fsync time. open without O_CREAT is not
 * recorded: it creates no name. Without $SLUICE_FS_TRACE the shim only forwards.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

extern "C" {

static std::atomic<long> g_seq;
static int g_trace_fd = -2; /* -2: not opened yet, -1: tracing off */

static int trace_fd(void) {
  if (g_trace_fd != -2) return g_trace_fd;
  const char* p = getenv("SLUICE_FS_TRACE");
  /* the raw system call: our own open() wrapper must not record the trace file */
  int fd = p && *p ? (int)syscall(SYS_openat, AT_FDCWD, p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
  g_trace_fd = fd < 0 ? -1 : fd;
  return g_trace_fd;
}

/* The absolute form of `path` relative to dirfd (AT_FDCWD or a directory fd). */
static void absolute(int dirfd, const char* path, char* out, size_t n) {
  if (path && path[0] == '/') {
    snprintf(out, n, "%s", path);
    return;
  }
  char base[PATH_MAX] = "";
  if (dirfd == AT_FDCWD) {
    if (!getcwd(base, sizeof base)) base[0] = '\0';
  } else {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t k = readlink(link, base, sizeof base - 1);
    base[k > 0 ? k : 0] = '\0';
  }
  snprintf(out, n, "%s/%s", base, path ? path : "");
}

static void record(const char* op, const char* a, const char* b) {
  int fd = trace_fd();
  if (fd < 0) return;
  int saved = errno;
  char line[2 * PATH_MAX + 64];
  long seq = g_seq.fetch_add(1);
  /* The pid keeps lines of different processes apart (each has its own counter). */
  int len = b ? snprintf(line, sizeof line, "%d %ld %s %s %s\n", (int)getpid(), seq, op, a, b)
              : snprintf(line, sizeof line, "%d %ld %s %s\n", (int)getpid(), seq, op, a);
  if (len > 0) {
    if ((size_t)len >= sizeof line) len = sizeof line - 1;
    ssize_t w = write(fd, line, (size_t)len);
    (void)w;
  }
  errno = saved;
}

static void record_at(const char* op, int dirfd, const char* path) {
  if (trace_fd() < 0) return;
  char abs[PATH_MAX];
  absolute(dirfd, path, abs, sizeof abs);
  record(op, abs, NULL);
}

static void record_fd(const char* op, int fd) {
  if (trace_fd() < 0) return;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t k = readlink(link, path, sizeof path - 1);
  path[k > 0 ? k : 0] = '\0';
  record(op, path, NULL);
}

// The next definition of `name` (libc's), looked up once.
#define REAL(name) \
  static const auto real_##name = reinterpret_cast<decltype(&::name)>(dlsym(RTLD_NEXT, #name))

int mkdir(const char* path, mode_t mode) {
  REAL(mkdir);
  int rc = real_mkdir(path, mode);
  if (rc == 0) record_at("mkdir", AT_FDCWD, path);
  return rc;
}

int mkdirat(int dirfd, const char* path, mode_t mode) {
  REAL(mkdirat);
  int rc = real_mkdirat(dirfd, path, mode);
  if (rc == 0) record_at("mkdir", dirfd, path);
  return rc;
}

static int open_mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, int) : 0;
}

int open(const char* path, int flags, ...) {
  REAL(open);
  va_list ap;
  va_start(ap, flags);
  int mode = open_mode_arg(flags, ap);
  va_end(ap);
  int fd = real_open(path, flags, mode);
  if (fd >= 0 && (flags & O_CREAT)) record_at("create", AT_FDCWD, path);
  return fd;
}

int open64(const char* path, int flags, ...) {
  REAL(open64);
  va_list ap;
  va_start(ap, flags);
  int mode = open_mode_arg(flags, ap);
  va_end(ap);
  int fd = real_open64(path, flags, mode);
  if (fd >= 0 && (flags & O_CREAT)) record_at("create", AT_FDCWD, path);
  return fd;
}

int openat(int dirfd, const char* path, int flags, ...) {
  REAL(openat);
  va_list ap;
  va_start(ap, flags);
  int mode = open_mode_arg(flags, ap);
  va_end(ap);
  int fd = real_openat(dirfd, path, flags, mode);
  if (fd >= 0 && (flags & O_CREAT)) record_at("create", dirfd, path);
  return fd;
}

int openat64(int dirfd, const char* path, int flags, ...) {
  REAL(openat64);
  va_list ap;
  va_start(ap, flags);
  int mode = open_mode_arg(flags, ap);
  va_end(ap);
  int fd = real_openat64(dirfd, path, flags, mode);
  if (fd >= 0 && (flags & O_CREAT)) record_at("create", dirfd, path);
  return fd;
}

int creat(const char* path, mode_t mode) {
  REAL(creat);
  int fd = real_creat(path, mode);
  if (fd >= 0) record_at("create", AT_FDCWD, path);
  return fd;
}

static void record_rename(int olddir, const char* from, int newdir, const char* to) {
  if (trace_fd() < 0) return;
  char a[PATH_MAX], b[PATH_MAX];
  absolute(olddir, from, a, sizeof a);
  absolute(newdir, to, b, sizeof b);
  record("rename", a, b);
}

int rename(const char* from, const char* to) {
  REAL(rename);
  int rc = real_rename(from, to);
  if (rc == 0) record_rename(AT_FDCWD, from, AT_FDCWD, to);
  return rc;
}

int renameat(int olddir, const char* from, int newdir, const char* to) {
  REAL(renameat);
  int rc = real_renameat(olddir, from, newdir, to);
  if (rc == 0) record_rename(olddir, from, newdir, to);
  return rc;
}

int renameat2(int olddir, const char* from, int newdir, const char* to, unsigned int flags) {
  REAL(renameat2);
  int rc = real_renameat2(olddir, from, newdir, to, flags);
  if (rc == 0) record_rename(olddir, from, newdir, to);
  return rc;
}

int fsync(int fd) {
  REAL(fsync);
  int rc = real_fsync(fd);
  if (rc == 0) record_fd("fsync", fd);
  return rc;
}

int fdatasync(int fd) {
  REAL(fdatasync);
  int rc = real_fdatasync(fd);
  if (rc == 0) record_fd("fdatasync", fd);
  return rc;
}

}  // extern "C"
