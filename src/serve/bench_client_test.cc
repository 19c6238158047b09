// Tests for serve/bench_client: what a user sees when the server is not there.
#include "serve/bench_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace strata {
namespace {

// A local TCP port with nothing listening: bound to an ephemeral port, then closed.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(BenchClient, NoServerIsUnavailableWithAReadableReason) {
  const std::string url = "http://127.0.0.1:" + std::to_string(closed_port());
  const StatusOr<ServerInfo> info = query_server_info(url);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kUnavailable);
  const std::string msg = info.status().message();
  EXPECT_NE(msg.find("GET " + url + "/v1/models"), std::string::npos) << msg;
  EXPECT_NE(msg.find("could not connect"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata
