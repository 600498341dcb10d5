// TMA descriptions (CUtensorMaps) per cache, encoded once per cache and geometry instead of at
// every run: a serving engine runs each layer's cache every step, and cuTensorMapEncodeTiled is
// host work on the per-layer path. Keyed by the cache pointers and the whole geometry, so a
// cache freed and reallocated at the same address with another shape is encoded again. A cache
// the TMA loads do not apply to is remembered as such. The flash kernel's K/V maps and the
// wgmma MLA kernel's latent map each have one.
#pragma once

#include <cstddef>
#include <vector>

namespace tripath {

template <class Key, class Maps>
class TensorMapCache {
 public:
  // make(&maps) -> bool encodes maps for `key` the first time; then the remembered result: true
  // and the maps copied to *maps (a few hundred bytes), or false (maps untouched).
  template <class Make>
  bool get(const Key& key, Maps* maps, Make make) {
    for (const Entry& e : entries_) {
      if (e.key == key) {
        if (e.ok) *maps = e.maps;
        return e.ok;
      }
    }
    if (entries_.size() >= kMaxEntries) entries_.clear();
    Entry e{key, false, {}};
    e.ok = make(&e.maps);
    entries_.push_back(e);
    if (e.ok) *maps = e.maps;
    return e.ok;
  }

 private:
  struct Entry {
    Key key;
    bool ok;
    Maps maps;
  };
  static constexpr size_t kMaxEntries = 1024;  // more caches than layers of any model
  std::vector<Entry> entries_;
};

}  // namespace tripath
