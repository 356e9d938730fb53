#include "wire/region_server.hpp"

#include "core/checksum.hpp"

namespace sluice::core {

std::uint64_t RegionLayout::chunk_count() const {
  return chunk_bytes == 0 ? 0 : (bytes + chunk_bytes - 1) / chunk_bytes;
}

std::uint64_t RegionLayout::chunk_size(std::uint64_t i) const {
  std::uint64_t off = chunk_offset(i);
  return off >= bytes ? 0 : std::min(chunk_bytes, bytes - off);
}

Status RegionLayout::validate() const {
  if (name.empty()) return invalid_argument("region has no name");
  if (bytes == 0) return invalid_argument("region '" + name + "' is empty");
  if (chunk_bytes == 0) return invalid_argument("region '" + name + "' has a chunk size of 0");
  if (checksums.size() != chunk_count()) {
    return invalid_argument("region '" + name + "': " + std::to_string(checksums.size()) +
                            " checksums for " + std::to_string(chunk_count()) + " chunks");
  }
  if (!digests.empty() && digests.size() != chunk_count()) {
    return invalid_argument("region '" + name + "': " + std::to_string(digests.size()) +
                            " digests for " + std::to_string(chunk_count()) + " chunks");
  }
  return {};
}

Result<RegionLayout> make_layout(std::string name, const std::uint8_t* data, std::uint64_t bytes,
                                 std::uint64_t chunk_bytes) {
  RegionLayout l;
  l.name = std::move(name);
  l.bytes = bytes;
  l.chunk_bytes = chunk_bytes;
  if (chunk_bytes == 0) return invalid_argument("chunk size must be positive");
  for (std::uint64_t i = 0; i < l.chunk_count(); ++i) {
    ChunkSums s = chunk_sums(data + l.chunk_offset(i), l.chunk_size(i), SumKind::both);
    l.checksums.push_back(*s.checksum);
    l.digests.push_back(*s.digest);
  }
  SLUICE_TRY(l.validate());
  return l;
}

Result<std::unique_ptr<RegionServer>> RegionServer::create(Server& server) {
  std::unique_ptr<RegionServer> rs(new RegionServer());
  RegionServer* raw = rs.get();
  server.on_sync("region.describe", [raw](const Message& req) -> Result<Message> {
    auto n = req.body.find("name");
    if (n == req.body.end() || !n->is_string()) {
      return invalid_argument("region.describe needs a 'name' string");
    }
    auto it = raw->regions_.find(n->get<std::string>());
    if (it == raw->regions_.end()) {
      return not_found("no region named '" + n->get<std::string>() + "'");
    }
    const auto& l = it->second.layout;
    Message reply("region.description");
    reply.body["name"] = l.name;
    reply.body["bytes"] = l.bytes;
    reply.body["chunk_bytes"] = l.chunk_bytes;
    reply.body["checksums"] = l.checksums;
    if (!l.digests.empty()) {
      auto& digests = reply.body["digests"] = nlohmann::json::array();
      for (const auto& d : l.digests)
        digests.push_back(digest_hex(d));
    }
    const auto& e = it->second;
    reply.blobs.push_back(
        (e.verified ? e.buf->verified_descriptor() : e.buf->descriptor()).encode());
    return reply;
  });
  server.on_sync("region.list", [raw](const Message&) -> Result<Message> {
    Message reply("region.list");
    reply.body["names"] = nlohmann::json::array();
    for (const auto& [name, e] : raw->regions_)
      reply.body["names"].push_back(name);
    return reply;
  });
  return rs;
}

RegionServer::~RegionServer() = default;

Status RegionServer::expose(const std::string& name, const RegisteredBuffer& buf,
                            std::uint64_t chunk_bytes) {
  SLUICE_ASSIGN_OR_RETURN(auto layout, make_layout(name, buf.data(), buf.size(), chunk_bytes));
  return expose(buf, std::move(layout), /*verified=*/true);
}

Status RegionServer::expose(const RegisteredBuffer& buf, RegionLayout layout, bool verified) {
  SLUICE_TRY(layout.validate());
  if (layout.bytes > buf.size()) {
    return invalid_argument("region '" + layout.name + "' is larger than its buffer");
  }
  std::string name = layout.name;
  regions_[name] = Entry{&buf, std::move(layout), verified};
  return {};
}

void RegionServer::withdraw(const std::string& name) {
  regions_.erase(name);
}

Result<RemoteRegion> describe_region(Client& client, const std::string& name, Millis timeout) {
  Message req("region.describe");
  req.body["name"] = name;
  SLUICE_ASSIGN_OR_RETURN(Message reply, client.call(req, timeout));
  RemoteRegion r;
  r.endpoint = client.endpoint();
  auto bad = [&](const std::string& what) {
    return protocol_error("region.describe reply from " + client.endpoint() + ": " + what);
  };
  const auto& b = reply.body;
  if (!b.contains("bytes") || !b["bytes"].is_number_unsigned()) return bad("no 'bytes'");
  if (!b.contains("chunk_bytes") || !b["chunk_bytes"].is_number_unsigned())
    return bad("no 'chunk_bytes'");
  if (!b.contains("checksums") || !b["checksums"].is_array()) return bad("no 'checksums'");
  r.layout.name = name;
  r.layout.bytes = b["bytes"].get<std::uint64_t>();
  r.layout.chunk_bytes = b["chunk_bytes"].get<std::uint64_t>();
  for (const auto& c : b["checksums"]) {
    if (!c.is_number_unsigned()) return bad("a checksum is not an unsigned integer");
    r.layout.checksums.push_back(c.get<std::uint64_t>());
  }
  if (auto ds = b.find("digests"); ds != b.end()) {
    if (!ds->is_array() || ds->size() != r.layout.checksums.size())
      return bad("'digests' is not one digest per checksum");
    for (const auto& d : *ds) {
      if (!d.is_string()) return bad("a digest is not a string");
      auto parsed = parse_digest(d.get_ref<const std::string&>(), "a digest");
      if (!parsed.is_ok()) return bad(parsed.status().message());
      r.layout.digests.push_back(*parsed);
    }
  }
  Status v = r.layout.validate();
  if (!v.is_ok()) return bad(v.message());
  if (reply.blobs.size() != 1) return bad("expected one descriptor frame");
  auto d = RegionDescriptor::decode(reply.blobs[0]);
  if (!d.is_ok()) return d.status().with_context(client.endpoint());
  r.descriptor = std::move(d).value();
  if (r.descriptor.length < r.layout.bytes) return bad("descriptor is shorter than the region");
  return r;
}

std::vector<ChunkRead> whole_region_chunks(const RegionLayout& layout) {
  std::vector<ChunkRead> out;
  out.reserve(layout.chunk_count());
  for (std::uint64_t i = 0; i < layout.chunk_count(); ++i) {
    ChunkRead c;
    c.src_offset = layout.chunk_offset(i);
    c.dst_offset = c.src_offset;
    c.bytes = layout.chunk_size(i);
    c.checksum = layout.checksums[i];
    if (!layout.digests.empty()) c.digest = layout.digests[i];
    out.push_back(c);
  }
  return out;
}

}  // namespace sluice::core
