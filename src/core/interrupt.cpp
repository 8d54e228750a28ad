#include "core/interrupt.hpp"

#include <csignal>
#include <signal.h>

#include "core/error.hpp"

namespace npuopt {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt_signal(int) { g_interrupted = 1; }

}  // namespace

void install_interrupt_handlers() {
    struct sigaction action {};
    action.sa_handler = on_interrupt_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
}

bool interrupted() { return g_interrupted != 0; }

void throw_if_interrupted() {
    if (interrupted()) throw Error(ErrorKind::interrupted, "interrupted by a signal");
}

}  // namespace npuopt
