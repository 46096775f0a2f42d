// Stop strings on streamed output: how much of the output's tail to hold back because a stop
// string could still begin there. Matching itself is the engine's (the lane core's commit rules);
// the server only keeps text that a later match would cut from reaching the client early.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::server {

// The length of the longest suffix of `text` that is a proper prefix of one of `stops`.
//
// Invariant that makes this enough: while the engine has not finished, no whole stop string lies
// in the bytes delivered so far, so a match that will start at byte p has text[p:] as a proper
// prefix of its stop string — and those bytes are held.
size_t stop_hold_length(std::string_view text, const std::vector<std::string>& stops);

}  // namespace dsv4::server
