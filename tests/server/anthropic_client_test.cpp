// The official `@anthropic-ai/sdk` npm client against the server's Messages API
// (tests/server/anthropic_client.mjs). The package is installed into a scratch folder of the build
// tree with npm; without node, npm or the registry the test is reported as skipped.
#include <catch2/catch.hpp>

#include "server_process.hpp"
#include "support/skip.hpp"

using namespace gemma4::test;

TEST_CASE("the anthropic npm client: messages, streaming, system, turns, stop_sequences, tool_use, count_tokens, images, typed errors",
          "[server][e2e][anthropic]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    const std::filesystem::path dir = std::filesystem::path(GEMMA4_BUILD_DIR) / "anthropic-client";
    if (const auto why = npm_client_folder(dir, "@anthropic-ai/sdk@0.137.0", "@anthropic-ai/sdk", "anthropic_client.mjs")) GEMMA4_SKIP(*why);
    ServerProcess server({"--api-key", "node-key", "--parallel", "4", "--max-soft-tokens", "70"}, "anthropic");
    const auto image = dir / "image.txt";
    std::ofstream(image) << png_data_url();
    const auto out = dir / "output.txt";
    const std::string run = "cd '" + dir.string() + "' && GEMMA4_BASE_URL=http://127.0.0.1:" + std::to_string(server.port()) +
                            " GEMMA4_API_KEY=node-key GEMMA4_MODEL=tiny GEMMA4_IMAGE_DATA_URL=\"$(cat '" + image.string() +
                            "')\" timeout 300 node anthropic_client.mjs >'" + out.string() + "' 2>&1";
    const int status = std::system(run.c_str());
    const std::string output = read_text(out);
    INFO(output);
    INFO(server.log());
    CHECK(status == 0);
    CHECK(output.find("anthropic client: ok") != std::string::npos);
}
