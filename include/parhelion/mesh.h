// A device mesh: the devices a collective kernel runs on (docs/distributed.md).
//
//   ph::Mesh mesh{{"x", 4}};            // a ring of 4 devices
//   ph::Mesh grid{{"x", 2}, {"y", 4}};  // 8 devices, coordinates (x, y)
//
// Devices are numbered row-major over the axes, the first outermost: device d of `grid` has
// coordinates (d / 4, d % 4).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace parhelion {

struct MeshAxis {
  std::string name;
  int64_t size = 1;
  bool operator==(const MeshAxis&) const = default;
};

class Mesh {
 public:
  Mesh() = default;
  // Throws UserError for an empty or repeated axis name or a size below 1.
  Mesh(std::initializer_list<MeshAxis> axes);
  explicit Mesh(std::vector<MeshAxis> axes);
  const std::vector<MeshAxis>& axes() const { return axes_; }
  bool empty() const { return axes_.empty(); }
  int64_t devices() const;
  // The coordinates of device `device`, one per axis; and the device at `coords`.
  std::vector<int64_t> coords(int64_t device) const;
  int64_t device_at(const std::vector<int64_t>& coords) const;
  std::string to_string() const;  // "x=2, y=4"

 private:
  std::vector<MeshAxis> axes_;
};

}  // namespace parhelion
