// Native Verilator bench of a board top's serial line (sim/link.py): a host on the other
// end of the UART, protocol-blind.
//
// The verilated top has the ports clk_in (the board's clock), uart_rx (into the design)
// and uart_tx (out of it); anything else is left alone. One cycle is one clock period.
//
//   bench JOB RESULT
//
// Job file (little endian): "HWGL", u32 version, u32 divisor (clock cycles per bit),
// u32 idle_cycles (line idle before the first byte), u64 max_cycles, u64 n_segments, then
// per segment: u64 n_bytes, u64 wait_reply (the reply bytes received in total before the
// segment may start), u8 bytes[n_bytes]; then u64 n_reply.
// The host sends each segment's bytes back to back (8N1, LSB first, one stop bit) once the
// design has sent `wait_reply` bytes in all, and samples the design's line in the middle of
// each bit. The run ends when every segment is sent, `n_reply` bytes have arrived and the
// design's line has been idle for ten bit times since (so an extra byte would be seen), or
// after `max_cycles`.
// Result file: "HWGM", u32 version, u32 status (0 ok, 1 timeout, 2 framing error on the
// design's line), u64 cycles, u64 n_bytes, then per byte: u8 value, u64 cycle (of its
// stop bit's middle).
#include "Vtop.h"
#include "verilated.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

double sc_time_stamp() { return 0; }

namespace {

constexpr uint32_t FORMAT_VERSION = 1;

struct Segment {
    uint64_t wait_reply;
    std::vector<uint8_t> bytes;
};

template <typename T> bool get(FILE* f, T& v) { return fread(&v, sizeof v, 1, f) == 1; }

[[noreturn]] void die(const char* what) {
    fprintf(stderr, "uart bench: %s\n", what);
    exit(3);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) die("usage: bench JOB RESULT");
    FILE* f = fopen(argv[1], "rb");
    if (!f) die("cannot open the job file");
    char magic[4];
    uint32_t version, divisor, idle;
    uint64_t max_cycles, n_seg, n_reply;
    if (fread(magic, 1, 4, f) != 4 || memcmp(magic, "HWGL", 4) != 0) die("not a job file");
    if (!get(f, version) || version != FORMAT_VERSION) die("job file version");
    if (!get(f, divisor) || !get(f, idle) || !get(f, max_cycles) || !get(f, n_seg))
        die("short job file");
    if (divisor < 2) die("divisor below 2");
    std::vector<Segment> segs(n_seg);
    for (auto& s : segs) {
        uint64_t n;
        if (!get(f, n) || !get(f, s.wait_reply)) die("short segment header");
        s.bytes.resize(n);
        if (n && fread(s.bytes.data(), 1, n, f) != n) die("short segment");
    }
    if (!get(f, n_reply)) die("short job file (n_reply)");
    fclose(f);

    auto ctx = std::make_unique<VerilatedContext>();
    auto top = std::make_unique<Vtop>(ctx.get());
    top->clk_in = 0;
    top->uart_rx = 1;
    top->eval();

    // host -> design
    size_t seg = 0, pos = 0;    // next byte to send
    int bit = -1;               // -1: idle; 0 start, 1..8 data, 9 stop
    uint32_t tick = 0;          // cycles into the current bit
    uint8_t cur = 0;
    // design -> host
    std::vector<uint8_t> got;
    std::vector<uint64_t> got_at;
    int rbit = -1;              // -1: waiting for a start bit
    uint32_t rtick = 0;
    uint8_t rcur = 0;
    uint32_t status = 0;
    uint64_t quiet = 0;         // cycles the design's line has been idle
    uint64_t cycle = 0;
    bool prev_tx = true;

    for (; cycle < max_cycles; ++cycle) {
        // drive the host's line for this cycle
        if (bit < 0 && cycle >= idle) {
            while (seg < segs.size() && pos >= segs[seg].bytes.size()) {
                ++seg;
                pos = 0;
            }
            if (seg < segs.size() && got.size() >= segs[seg].wait_reply) {
                cur = segs[seg].bytes[pos++];
                bit = 0;
                tick = 0;
            }
        }
        int level = 1;
        if (bit == 0) level = 0;
        else if (bit >= 1 && bit <= 8) level = (cur >> (bit - 1)) & 1;
        top->uart_rx = level;
        top->clk_in = 1;
        top->eval();
        top->clk_in = 0;
        top->eval();
        if (bit >= 0 && ++tick == divisor) {
            tick = 0;
            if (++bit == 10) bit = -1;
        }
        // sample the design's line
        bool tx = top->uart_tx & 1;
        if (rbit < 0) {
            if (prev_tx && !tx) {
                rbit = 0;
                rtick = 0;
            }
        } else if (++rtick == (rbit == 0 ? divisor / 2 : divisor)) {
            rtick = 0;
            if (rbit == 0) {
                if (tx) rbit = -1;      // a glitch, not a start bit
                else rbit = 1;
            } else if (rbit <= 8) {
                rcur = static_cast<uint8_t>((rcur >> 1) | (tx ? 0x80 : 0));
                ++rbit;
            } else {
                if (!tx) { status = 2; break; }
                got.push_back(rcur);
                got_at.push_back(cycle);
                rbit = -1;
            }
        }
        quiet = tx ? quiet + 1 : 0;
        prev_tx = tx;
        if (seg >= segs.size() && got.size() >= n_reply && rbit < 0 && quiet > 10ull * divisor)
            break;
    }
    if (cycle >= max_cycles) status = 1;
    top->final();

    FILE* o = fopen(argv[2], "wb");
    if (!o) die("cannot write the result file");
    uint64_t n = got.size();
    fwrite("HWGM", 1, 4, o);
    fwrite(&FORMAT_VERSION, sizeof FORMAT_VERSION, 1, o);
    fwrite(&status, sizeof status, 1, o);
    fwrite(&cycle, sizeof cycle, 1, o);
    fwrite(&n, sizeof n, 1, o);
    for (uint64_t k = 0; k < n; ++k) {
        fwrite(&got[k], 1, 1, o);
        fwrite(&got_at[k], sizeof got_at[k], 1, o);
    }
    fclose(o);
    return 0;
}
