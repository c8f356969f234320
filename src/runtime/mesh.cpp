#include "parhelion/mesh.h"

#include "parhelion/error.h"

namespace parhelion {

Mesh::Mesh(std::initializer_list<MeshAxis> axes) : Mesh(std::vector<MeshAxis>(axes)) {}

Mesh::Mesh(std::vector<MeshAxis> axes) : axes_(std::move(axes)) {
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i].name.empty()) throw UserError("a mesh axis needs a name");
    if (axes_[i].size < 1)
      throw UserError("mesh axis " + axes_[i].name + " has " + std::to_string(axes_[i].size) +
                      " devices; it needs at least 1");
    for (size_t j = 0; j < i; ++j)
      if (axes_[j].name == axes_[i].name) throw UserError("mesh axis " + axes_[i].name + " is named twice");
  }
}

int64_t Mesh::devices() const {
  int64_t n = 1;
  for (const MeshAxis& a : axes_) n *= a.size;
  return n;
}

std::vector<int64_t> Mesh::coords(int64_t device) const {
  std::vector<int64_t> c(axes_.size());
  for (size_t i = axes_.size(); i-- > 0;) {
    c[i] = device % axes_[i].size;
    device /= axes_[i].size;
  }
  return c;
}

int64_t Mesh::device_at(const std::vector<int64_t>& coords) const {
  int64_t d = 0;
  for (size_t i = 0; i < axes_.size(); ++i) d = d * axes_[i].size + coords.at(i);
  return d;
}

std::string Mesh::to_string() const {
  std::string s;
  for (size_t i = 0; i < axes_.size(); ++i) s += (i ? ", " : "") + axes_[i].name + "=" + std::to_string(axes_[i].size);
  return s;
}

}  // namespace parhelion
