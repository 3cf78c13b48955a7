#include "worker_pool.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "infinipipe/core/error.h"

namespace infinipipe::properties {

namespace {

using Clock = std::chrono::steady_clock;

struct Worker {
  pid_t pid = -1;
  int fd = -1;
  std::string buffer;
  int64_t current = -1;  // the item it has begun and not finished
  Clock::time_point started;
};

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(3);  // the parent is gone
    done += static_cast<size_t>(n);
  }
}

// Items are handed out through a counter in shared memory, so a slow item never holds back the
// ones behind it. Each worker announces an item before it starts ("B i") and when it is done
// ("E i line"): the parent always knows which item a dead or stuck worker was on.
[[noreturn]] void work(std::atomic<int64_t>* next, int64_t count, int fd,
                       const std::function<std::string(int64_t)>& evaluate) {
  for (int64_t i = next->fetch_add(1); i < count; i = next->fetch_add(1)) {
    write_all(fd, "B " + std::to_string(i) + "\n");
    write_all(fd, "E " + std::to_string(i) + " " + evaluate(i) + "\n");
  }
  _exit(0);
}

std::string exit_text(int status) {
  if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

void run_pool(int64_t count, const PoolOptions& options,
              const std::function<std::string(int64_t)>& evaluate,
              const std::function<void(const ItemOutcome&)>& report) {
  void* shared = mmap(nullptr, sizeof(std::atomic<int64_t>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  check(shared != MAP_FAILED, std::string("mmap for the worker pool failed: ") + strerror(errno));
  auto* next = new (shared) std::atomic<int64_t>(0);
  std::vector<Worker> workers;

  auto spawn = [&] {
    int fds[2];
    check(pipe(fds) == 0, std::string("pipe failed: ") + strerror(errno));
    const pid_t pid = fork();
    check(pid >= 0, std::string("fork failed: ") + strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // a stopped run leaves no worker planning on
      close(fds[0]);
      for (const Worker& w : workers) close(w.fd);
      work(next, count, fds[1], evaluate);
    }
    close(fds[1]);
    Worker w;
    w.pid = pid;
    w.fd = fds[0];
    workers.push_back(w);
  };
  auto take_lines = [&](Worker& w) {
    size_t end;
    while ((end = w.buffer.find('\n')) != std::string::npos) {
      const std::string line = w.buffer.substr(0, end);
      w.buffer.erase(0, end + 1);
      const size_t space = line.find(' ', 2);
      const int64_t index = std::stoll(line.substr(2, space - 2));
      if (line[0] == 'B') {
        w.current = index;
        w.started = Clock::now();
      } else {
        report({index, ItemStatus::kDone, space == std::string::npos ? "" : line.substr(space + 1),
                "", since(w.started)});
        w.current = -1;
      }
    }
  };
  auto drain = [&](Worker& w) {  // true at end of file
    char chunk[65536];
    const ssize_t n = read(w.fd, chunk, sizeof chunk);
    if (n > 0) w.buffer.append(chunk, static_cast<size_t>(n));
    take_lines(w);
    return n == 0;
  };
  // The worker is gone (or killed): what it finished is reported, what it was on is not done.
  auto retire = [&](size_t k, ItemStatus status, const std::string& why) {
    Worker w = workers[k];
    workers.erase(workers.begin() + static_cast<std::ptrdiff_t>(k));
    int exit_status = 0;
    waitpid(w.pid, &exit_status, 0);
    while (!drain(w)) {
    }
    close(w.fd);
    if (w.current >= 0)
      report({w.current, status, "",
              status == ItemStatus::kCrashed ? "the worker " + exit_text(exit_status) : why,
              since(w.started)});
    if (next->load() < count) spawn();
  };

  const int64_t wanted = std::max<int64_t>(1, std::min<int64_t>(options.workers, count));
  for (int64_t k = 0; k < wanted; ++k) spawn();
  while (!workers.empty()) {
    std::vector<pollfd> fds;
    for (const Worker& w : workers) fds.push_back({w.fd, POLLIN, 0});
    poll(fds.data(), fds.size(), 100);
    for (size_t k = fds.size(); k-- > 0;) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (drain(workers[k])) retire(k, ItemStatus::kCrashed, "");
    }
    for (size_t k = workers.size(); k-- > 0;) {
      const Worker& w = workers[k];
      if (w.current < 0 || since(w.started) <= options.item_timeout_s) continue;
      kill(w.pid, SIGKILL);
      char limit[32];
      snprintf(limit, sizeof limit, "%g", options.item_timeout_s);
      retire(k, ItemStatus::kTimedOut, std::string("no result within ") + limit + " s");
    }
  }
  munmap(shared, sizeof(std::atomic<int64_t>));
}

}  // namespace infinipipe::properties
