/* Routes ALSA's library messages to the Rust side (src/alsa_log.rs) instead of
 * stderr. ALSA's error handler is a C variadic function, which stable Rust cannot define;
 * this shim formats the message and hands Rust a plain string. */
#include <alsa/asoundlib.h>
#include <stdarg.h>
#include <stdio.h>

extern void empathic_alsa_message(const char *file, int line, const char *function, int err,
                                  const char *message);

static void route(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    empathic_alsa_message(file, line, function, err, message);
}

int empathic_alsa_route_messages(void) { return snd_lib_error_set_handler(route); }
