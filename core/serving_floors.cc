#include "serving_floors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sluice/durable_fs.h"

namespace sluice::core {

namespace fs = std::filesystem;

namespace {
constexpr const char* kHeader = "sluice-broker-floors v1";

Error io_error(const std::string& what, const std::string& path, int err) {
  return Error(Errc::storage_failure, what + " " + path + ": " + std::strerror(err));
}

std::string field(const std::optional<Incarnation>& i) { return i ? std::to_string(i->value()) : "-"; }

bool parse_field(const std::string& s, std::optional<Incarnation>& out) {
  if (s == "-") {
    out.reset();
    return true;
  }
  if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  try {
    out = Incarnation{std::stoull(s)};
  } catch (const std::exception&) {
    return false;
  }
  return true;
}
}  // namespace

std::string floors_path(const std::string& data_dir) { return (fs::path(data_dir) / "broker" / "floors").string(); }

Result<ServingFloors> load_floors(const std::string& path, FloorsFileState* state) {
  FloorsFileState local;
  FloorsFileState& st = state ? *state : local;
  st = {};
  ServingFloors out;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(path, ec) && !ec) return out;
    return Error(Errc::storage_failure, "cannot read " + path);
  }
  std::stringstream whole;
  whole << in.rdbuf();
  if (in.bad()) return Error(Errc::storage_failure, "cannot read " + path);
  const std::string text = whole.str();
  st.exists = true;
  std::size_t n = 0;
  auto bad = [&](const std::string& why) {
    return Error(Errc::corrupt_data, path + " line " + std::to_string(n) + ": " + why +
                                       " (the broker's durable floors; see docs/architecture.md)");
  };
  // An unfinished append (header comment): from the line holding the first NUL byte on, or
  // a last line without its newline. Only appends ever write there, and the broker rewrites
  // the whole file after a failed or torn one, so nothing complete lies beyond.
  std::size_t end = std::min(text.size(), text.find('\0'));
  if (end > 0 && text[end - 1] != '\n') {
    const auto nl = text.rfind('\n', end - 1);
    end = nl == std::string::npos ? 0 : nl + 1;
  }
  st.torn_tail = end != text.size();
  for (std::size_t pos = 0; pos < end;) {
    const std::size_t nl = text.find('\n', pos);
    const std::string_view line = std::string_view(text).substr(pos, nl - pos);
    pos = nl + 1;
    ++n;
    if (n == 1) {
      if (line != kHeader) return bad("expected '" + std::string(kHeader) + "'");
      continue;
    }
    if (line.empty()) continue;
    // Five tab-separated fields (a start with 100,000 names reads every line: no streams).
    std::string_view rest = line;
    std::string_view f[5];
    std::size_t count = 0;
    for (; count < 5; ++count) {
      const auto tab = rest.find('\t');
      f[count] = rest.substr(0, tab);
      if (tab == std::string_view::npos) {
        ++count;
        break;
      }
      rest = rest.substr(tab + 1);
    }
    if (count != 5 || f[4].find('\t') != std::string_view::npos) return bad("expected 5 tab-separated fields");
    ServingFloor fl;
    if (!parse_field(std::string(f[3]), fl.served) || !parse_field(std::string(f[4]), fl.deleted))
      return bad("bad incarnation");
    out.insert_or_assign(StreamKey{std::string(f[0]), std::string(f[1]), std::string(f[2])}, fl);
    ++st.lines;
  }
  // Not even a whole header: a file whose first write was torn is refused (store_floors
  // writes it whole through a rename, so this is damage, not a crash).
  if (n == 0) return bad("empty file");
  return out;
}

namespace {
std::string lines_of(const ServingFloors& floors) {
  std::string text;
  for (const auto& [k, f] : floors)
    text += k.tenant + "\t" + k.ns + "\t" + k.name + "\t" + field(f.served) + "\t" + field(f.deleted) + "\n";
  return text;
}

bool write_all(int fd, const std::string& text) {
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t w = ::write(fd, text.data() + off, text.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    off += static_cast<std::size_t>(w);
  }
  return true;
}
}  // namespace

Result<void> append_floors(const std::string& path, const ServingFloors& changed) {
  if (changed.empty()) return {};
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open", path, errno);
  if (!write_all(fd, lines_of(changed))) {
    const int e = errno;
    ::close(fd);
    return io_error("cannot append to", path, e);
  }
  // The file and its directory entry are durable already (store_floors wrote them): the
  // new bytes and the size are what fdatasync makes durable.
  if (::fdatasync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    return io_error("cannot fdatasync", path, e);
  }
  ::close(fd);
  return {};
}

Result<void> store_floors(const std::string& path, const ServingFloors& floors) {
  const fs::path dir = fs::path(path).parent_path();
  if (auto r = create_directories_durably(dir.string()); !r) return r.error();
  const std::string text = std::string(kHeader) + "\n" + lines_of(floors);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", tmp, errno);
  if (!write_all(fd, text)) {
    const int e = errno;
    ::close(fd);
    return io_error("cannot write", tmp, e);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    return io_error("cannot fsync", tmp, e);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return io_error("cannot rename into", path, errno);
  return fsync_directory(dir.string());
}

}  // namespace sluice::core
