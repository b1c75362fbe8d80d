// The official `openai` npm client against the server (tests/server/openai_client.mjs): chat,
// completions and the Responses API. The package is installed into a scratch folder of the build
// tree with npm; without node, npm or the registry the test is reported as skipped.
#include <catch2/catch.hpp>

#include "server_process.hpp"
#include "support/skip.hpp"

using namespace gemma4::test;

TEST_CASE("the openai npm client: chat, streaming, usage, stop, tools, images, sampling fields, an alias, typed errors, the Responses API", "[server][e2e][openai]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    const std::filesystem::path dir = std::filesystem::path(GEMMA4_BUILD_DIR) / "openai-client";
    // The newest 4.x (4.104.0 at the time of writing); client.responses came in 4.87.
    if (const auto why = npm_client_folder(dir, "openai@4", "openai", "openai_client.mjs")) GEMMA4_SKIP(*why);
    ServerProcess server({"--api-key", "node-key", "--parallel", "4", "--max-soft-tokens", "70", "--alias", "tiny-alias"}, "openai");
    const auto image = dir / "image.txt";
    std::ofstream(image) << png_data_url();
    const auto out = dir / "output.txt";
    const std::string run = "cd '" + dir.string() + "' && GEMMA4_BASE_URL=http://127.0.0.1:" + std::to_string(server.port()) +
                            "/v1 GEMMA4_API_KEY=node-key GEMMA4_MODEL=tiny GEMMA4_MODEL_ALIAS=tiny-alias GEMMA4_IMAGE_DATA_URL=\"$(cat '" + image.string() +
                            "')\" timeout 300 node openai_client.mjs >'" + out.string() + "' 2>&1";
    const int status = std::system(run.c_str());
    const std::string output = read_text(out);
    INFO(output);
    INFO(server.log());
    CHECK(status == 0);
    CHECK(output.find("openai client: ok") != std::string::npos);
}
