// server::Engine over the lane core's Engine API (lanes/engine_api.h): request mapping, events,
// counters, halt.
#pragma once

#include <functional>

#include "lanes/engine_api.h"
#include "server/engine.h"

namespace dsv4::server {

class LanesEngine final : public Engine {
 public:
  // `engine` must outlive this. `halt` stops it at a round boundary (e.g. LaneHost::begin_drain
  // with no grace).
  LanesEngine(lanes::Engine& engine, std::function<void()> halt);

  StatusOr<RequestId> submit(GenerationRequest request, EventSink sink) override;
  void cancel(RequestId id) override;
  EngineStats stats() const override;
  void halt() override;

  // The lane-core request a server request becomes (exposed for tests).
  static lanes::Request to_lanes(const GenerationRequest& request);

 private:
  lanes::Engine& engine_;
  std::function<void()> halt_;
};

}  // namespace dsv4::server
