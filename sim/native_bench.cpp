// Native Verilator test bench implementing the StreamJob semantics of sim/base.py.
//
// Compiled once per design together with the verilated model of the wrapper that
// sim/native.py puts around the design (top module hwgen_native_top: the design's ports,
// except that its reset comes from a register loaded from the input rst_d), it
// reproduces the cocotb bench (sim/cocotb_bench.py) cycle for cycle -- same reset, same
// cycle numbering, same stall draws from CPython's random.Random(seed) -- without any
// Python in the loop.
//
//   bench JOB RESULT        run the job file, write the result file (formats below)
//   bench --random N KEY..  print N draws of random.Random(seed).random() as hex doubles,
//                           KEY = the seed's 32-bit words (CPython's init_by_array key)
//
// Job file (little endian): "HWGJ", u32 version, u32 in_words, u32 n_key, u64 n_in,
// u64 n_out, f64 stall_in, f64 stall_out, u64 max_cycles, u64 extra_cycles,
// u32 key[n_key], u32 beats[n_in * in_words], u8 last[n_in],
// u32 n_taps, u32 tap_bits[n_taps], u64 wave_from, u64 wave_to, u32 n_path, char path[n_path],
// u64 n_load, u32 load[n_load].
// Result file: "HWGR", u32 version, u32 status (0 ok, 1 timeout, 2 extra beat),
// u32 out_words, u64 cycles, u64 n_in_times, u64 n_out_got, u64 load_cycles,
// u64 in_times[n_in_times],
// u64 out_times[n_out_got], u32 beats[n_out_got * out_words], u8 last[n_out_got],
// u32 n_taps, then per tap: u64 n_beats, u64 times[n_beats], u32 words[n_beats * words(tap)].
//
// Taps (a design built for observation, sim/native.py): the wrapper then has the ports
// hwgen_taps_valid, hwgen_taps_ready (one bit per tapped stream) and hwgen_taps_payload
// (the streams' payloads side by side, tap_bits[k] bits each, in order); every transfer on
// a tapped stream (valid & ready at an edge) is recorded with its cycle.
// Weight load (a design with memories loaded after reset has the ports s_wload_tdata,
// s_wload_tvalid, s_wload_tready): after reset the load words are offered one per cycle
// until each is taken, before the stream loop; load_cycles counts those cycles, and the
// stream loop's cycles count from the cycle after.
// Waveforms (built with HWGEN_WAVE_VCD or HWGEN_WAVE_FST defined, and verilator --trace or
// --trace-fst): dumped to `path` from the cycle in which input beat `wave_from` is next to
// be transferred up to and including the cycle that transfers output beat `wave_to` - 1
// (wave_to = 0: nothing is dumped). One cycle is 10 ns: clock low at 10c, high at 10c + 5.
#include "Vtop.h"
#include "verilated.h"
#if defined(HWGEN_WAVE_VCD)
#include "verilated_vcd_c.h"
using WaveFile = VerilatedVcdC;
#elif defined(HWGEN_WAVE_FST)
#include "verilated_fst_c.h"
using WaveFile = VerilatedFstC;
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// Verilator calls this for $time; the bench never uses simulation time.
double sc_time_stamp() { return 0; }

namespace {

constexpr uint32_t FORMAT_VERSION = 3;
constexpr int RESET_CYCLES = 4;  // as sim/cocotb_bench.py

// ---- CPython's random.Random: MT19937 (_randommodule.c) ----------------------------------
class PyRandom {
  public:
    explicit PyRandom(const std::vector<uint32_t>& key) { init_by_array(key); }

    // random.random(): 53-bit precision double in [0, 1)
    double random() {
        uint32_t a = genrand() >> 5, b = genrand() >> 6;
        return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
    }

  private:
    static constexpr int N = 624, M = 397;
    uint32_t mt[N];
    int mti = N + 1;

    void init_genrand(uint32_t s) {
        mt[0] = s;
        for (mti = 1; mti < N; mti++)
            mt[mti] = 1812433253U * (mt[mti - 1] ^ (mt[mti - 1] >> 30)) + uint32_t(mti);
    }

    void init_by_array(const std::vector<uint32_t>& key) {
        size_t key_length = key.empty() ? 1 : key.size();
        init_genrand(19650218U);
        size_t i = 1, j = 0;
        for (size_t k = (N > key_length ? N : key_length); k; k--) {
            mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525U))
                    + (key.empty() ? 0 : key[j]) + uint32_t(j);
            i++; j++;
            if (i >= N) { mt[0] = mt[N - 1]; i = 1; }
            if (j >= key_length) j = 0;
        }
        for (size_t k = N - 1; k; k--) {
            mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941U)) - uint32_t(i);
            i++;
            if (i >= N) { mt[0] = mt[N - 1]; i = 1; }
        }
        mt[0] = 0x80000000U;
    }

    uint32_t genrand() {
        static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
        uint32_t y;
        if (mti >= N) {
            int kk;
            for (kk = 0; kk < N - M; kk++) {
                y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
                mt[kk] = mt[kk + M] ^ (y >> 1) ^ mag01[y & 0x1U];
            }
            for (; kk < N - 1; kk++) {
                y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
                mt[kk] = mt[kk + (M - N)] ^ (y >> 1) ^ mag01[y & 0x1U];
            }
            y = (mt[N - 1] & 0x80000000U) | (mt[0] & 0x7fffffffU);
            mt[N - 1] = mt[M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
            mti = 0;
        }
        y = mt[mti++];
        y ^= (y >> 11);
        y ^= (y << 7) & 0x9d2c5680U;
        y ^= (y << 15) & 0xefc60000U;
        y ^= (y >> 18);
        return y;
    }
};

// ---- port access for every width Verilator uses (C/S/I/QData, VlWide<N>) ----------------
template <class T> struct PortWords {
    static constexpr size_t value = sizeof(T) > 4 ? 2 : 1;
};
template <size_t N> struct PortWords<VlWide<N>> {
    static constexpr size_t value = N;
};

template <class T> inline void put(T& port, const uint32_t* w) {
    if constexpr (sizeof(T) > 4) port = T(w[0]) | (T(w[1]) << 32);
    else port = T(w[0]);
}
template <size_t N> inline void put(VlWide<N>& port, const uint32_t* w) {
    for (size_t k = 0; k < N; k++) port.m_storage[k] = w[k];
}
template <class T> inline void get(const T& port, uint32_t* w) {
    uint64_t v = uint64_t(port);
    w[0] = uint32_t(v);
    if constexpr (sizeof(T) > 4) w[1] = uint32_t(v >> 32);
}
template <size_t N> inline void get(const VlWide<N>& port, uint32_t* w) {
    for (size_t k = 0; k < N; k++) w[k] = port.m_storage[k];
}

// ---- taps: present only in a design built for observation ------------------------------
template <class T, class = void> struct HasTaps : std::false_type {};
template <class T>
struct HasTaps<T, std::void_t<decltype(std::declval<T&>().hwgen_taps_payload)>>
    : std::true_type {};

// bits [off, off + n) of the little-endian words w, into out[0 .. (n + 31) / 32)
inline void bit_slice(const uint32_t* w, uint64_t off, uint32_t n, uint32_t* out) {
    const uint32_t words = (n + 31) / 32;
    for (uint32_t k = 0; k < words; k++) {
        const uint64_t b = off + 32ull * k;
        const uint64_t q = b / 32, r = b % 32;
        uint64_t v = w[q] >> r;
        if (r) v |= uint64_t(w[q + 1]) << (32 - r);
        const uint32_t left = n - 32 * k;
        out[k] = left >= 32 ? uint32_t(v) : uint32_t(v) & ((1u << left) - 1);
    }
}

struct Tap {
    uint32_t bits = 0, words = 0;
    uint64_t offset = 0;
    std::vector<uint64_t> times;
    std::vector<uint32_t> data;
};

template <class Top> struct TapReader {
    std::vector<Tap>& taps;
    // the tap ports' words (one spare word so that bit_slice may read one past the end)
    std::vector<uint32_t> valid, ready, payload;

    explicit TapReader(std::vector<Tap>& t) : taps(t) {
        if constexpr (HasTaps<Top>::value) {
            using V = std::remove_reference_t<decltype(std::declval<Top&>().hwgen_taps_valid)>;
            using P = std::remove_reference_t<decltype(std::declval<Top&>().hwgen_taps_payload)>;
            valid.assign(PortWords<V>::value + 1, 0);
            ready.assign(PortWords<V>::value + 1, 0);
            payload.assign(PortWords<P>::value + 1, 0);
        }
    }

    // record the transfers of this cycle (values settled before the edge)
    void sample(Top& top, uint64_t cycle) {
        if constexpr (HasTaps<Top>::value) {
            if (taps.empty()) return;
            get(top.hwgen_taps_valid, valid.data());
            get(top.hwgen_taps_ready, ready.data());
            bool any = false;
            for (size_t w = 0; w + 1 < valid.size(); w++) any |= (valid[w] & ready[w]) != 0;
            if (!any) return;
            get(top.hwgen_taps_payload, payload.data());
            for (size_t k = 0; k < taps.size(); k++) {
                if (!((valid[k / 32] & ready[k / 32]) >> (k % 32) & 1)) continue;
                Tap& t = taps[k];
                t.times.push_back(cycle);
                const size_t at = t.data.size();
                t.data.resize(at + t.words);
                bit_slice(payload.data(), t.offset, t.bits, &t.data[at]);
            }
        } else {
            (void)top; (void)cycle;
        }
    }
};

// ---- the weight load: present only in a design with memories loaded after reset --------
template <class T, class = void> struct HasWload : std::false_type {};
template <class T>
struct HasWload<T, std::void_t<decltype(std::declval<T&>().s_wload_tdata)>> : std::true_type {};

// offer the words one per cycle until each is taken; the cycles it took (stops after
// max_cycles: then `done` is false)
template <class Top>
uint64_t load_words(Top& top, const std::vector<uint32_t>& words, uint64_t max_cycles,
                    bool& done) {
    uint64_t cycles = 0;
    done = true;
    if constexpr (HasWload<Top>::value) {
        size_t k = 0;
        while (k < words.size()) {
            if (cycles >= max_cycles) { done = false; break; }
            top.s_wload_tdata = words[k];
            top.s_wload_tvalid = 1;
            top.eval();
            const bool took = top.s_wload_tready;
            top.clk = 1;
            top.eval();
            top.clk = 0;
            cycles++;
            if (took) k++;
        }
        top.s_wload_tvalid = 0;
    } else {
        (void)top; (void)words; (void)max_cycles;
    }
    return cycles;
}

// ---- files -------------------------------------------------------------------------------
[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "hwgen native bench: %s\n", msg.c_str());
    std::exit(3);
}

struct Reader {
    FILE* f;
    explicit Reader(const char* path) : f(std::fopen(path, "rb")) {
        if (!f) die(std::string("cannot open ") + path);
    }
    ~Reader() { std::fclose(f); }
    void raw(void* p, size_t n) {
        if (n && std::fread(p, 1, n, f) != n) die("job file is truncated");
    }
    template <class T> T val() { T v; raw(&v, sizeof v); return v; }
};

struct Writer {
    FILE* f;
    explicit Writer(const std::string& path) : f(std::fopen(path.c_str(), "wb")) {
        if (!f) die("cannot create " + path);
    }
    void raw(const void* p, size_t n) {
        if (n && std::fwrite(p, 1, n, f) != n) die("cannot write the result");
    }
    template <class T> void val(T v) { raw(&v, sizeof v); }
    void close() { if (std::fclose(f) != 0) die("cannot write the result"); }
};

int print_random(int argc, char** argv) {
    if (argc < 3) die("usage: --random N KEY...");
    unsigned long long n = std::strtoull(argv[2], nullptr, 0);
    std::vector<uint32_t> key;
    for (int k = 3; k < argc; k++) key.push_back(uint32_t(std::strtoul(argv[k], nullptr, 0)));
    PyRandom rng(key);
    for (unsigned long long k = 0; k < n; k++) std::printf("%a\n", rng.random());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && std::strcmp(argv[1], "--random") == 0) return print_random(argc, argv);
    if (argc != 3) die("usage: bench JOB RESULT");

    // ---- the job
    Reader in(argv[1]);
    char magic[4];
    in.raw(magic, 4);
    if (std::memcmp(magic, "HWGJ", 4) != 0 || in.val<uint32_t>() != FORMAT_VERSION)
        die("not a job file of this version");
    const uint32_t in_words = in.val<uint32_t>();
    const uint32_t n_key = in.val<uint32_t>();
    const uint64_t n_in = in.val<uint64_t>(), n_out = in.val<uint64_t>();
    const double stall_in = in.val<double>(), stall_out = in.val<double>();
    const uint64_t max_cycles = in.val<uint64_t>(), extra_cycles = in.val<uint64_t>();
    std::vector<uint32_t> key(n_key);
    in.raw(key.data(), 4 * size_t(n_key));

    auto ctx = std::make_unique<VerilatedContext>();
    ctx->commandArgs(1, argv);
#if defined(HWGEN_WAVE_VCD) || defined(HWGEN_WAVE_FST)
    ctx->traceEverOn(true);
#endif
    auto top = std::make_unique<Vtop>(ctx.get(), "top");

    using InT = std::remove_reference_t<decltype(top->s_axis_tdata)>;
    using OutT = std::remove_reference_t<decltype(top->m_axis_tdata)>;
    constexpr size_t IW = PortWords<InT>::value, OW = PortWords<OutT>::value;
    // input beats restrided to the port's word count (zero padded / cut)
    std::vector<uint32_t> beats(size_t(n_in) * IW + IW, 0);
    {
        std::vector<uint32_t> row(in_words ? in_words : 1);
        for (uint64_t b = 0; b < n_in; b++) {
            in.raw(row.data(), 4 * size_t(in_words));
            std::memcpy(&beats[b * IW], row.data(), 4 * (in_words < IW ? in_words : IW));
        }
    }
    std::vector<uint8_t> lasts(n_in);
    in.raw(lasts.data(), n_in);
    std::vector<Tap> taps(in.val<uint32_t>());
    {
        uint64_t offset = 0;
        for (Tap& t : taps) {
            t.bits = in.val<uint32_t>();
            t.words = (t.bits + 31) / 32;
            t.offset = offset;
            offset += t.bits;
        }
    }
    if (!taps.empty() && !HasTaps<Vtop>::value) die("the job taps streams the design lacks");
    const uint64_t wave_from = in.val<uint64_t>(), wave_to = in.val<uint64_t>();
    std::string wave_path(in.val<uint32_t>(), '\0');
    in.raw(wave_path.data(), wave_path.size());
    std::vector<uint32_t> load(in.val<uint64_t>());
    in.raw(load.data(), 4 * load.size());
    if (!load.empty() && !HasWload<Vtop>::value) die("the job loads weights the design lacks a port for");
#if defined(HWGEN_WAVE_VCD) || defined(HWGEN_WAVE_FST)
    std::unique_ptr<WaveFile> wave;
    bool waving = false, waved = false;
#else
    if (wave_to) die("the job asks for waveforms of a bench built without them");
#endif
    TapReader<Vtop> tap_reader(taps);

    // ---- reset: RESET_CYCLES rising edges with rst high, everything else low. The
    // wrapper (sim/native.py) registers the design's rst: rst_q starts high and loads
    // rst_d at every edge, so rst_d goes low before the last reset edge and the design
    // sees rst low from cycle 0 on, as in the cocotb bench.
    PyRandom rng(key);
    top->clk = 0;
    top->rst_d = 1;
    top->s_axis_tvalid = 0;
    top->s_axis_tlast = 0;
    top->m_axis_tready = 0;
    {
        std::vector<uint32_t> zero(IW, 0);
        put(top->s_axis_tdata, zero.data());
    }
    top->eval();
    for (int r = 0; r < RESET_CYCLES; r++) {
        if (r == RESET_CYCLES - 1) top->rst_d = 0;
        top->clk = 1;
        top->eval();
        top->clk = 0;
        top->eval();
    }

    bool loaded = true;
    const uint64_t load_cycles = load_words(*top, load, max_cycles, loaded);

    // ---- the stream loop (mirrors sim/cocotb_bench.py statement by statement)
    std::vector<uint64_t> in_times, out_times;
    std::vector<uint32_t> out_beats;
    std::vector<uint8_t> out_last;
    in_times.reserve(n_in);
    out_times.reserve(n_out);
    out_beats.reserve(size_t(n_out) * OW);
    out_last.reserve(n_out);
    uint64_t i = 0, got = 0;
    bool offering = false;
    // cycle at which to stop, once all outputs arrived (-1: not yet)
    int64_t stop_at = n_out == 0 ? int64_t(extra_cycles) : -1;
    uint32_t status = 1;  // timeout
    uint64_t cycle = 0;
    uint32_t word[OW];
    while (loaded) {
#if defined(HWGEN_WAVE_VCD) || defined(HWGEN_WAVE_FST)
        if (!waving && !waved && wave_to && i >= wave_from) {
            wave = std::make_unique<WaveFile>();
            top->trace(wave.get(), 99);
            wave->set_time_unit("1ns");
            wave->set_time_resolution("1ns");
            wave->open(wave_path.c_str());
            if (!wave->isOpen()) die("cannot create " + wave_path);
            waving = true;
        }
#endif
        if (!offering && i < n_in && (stall_in == 0 || rng.random() >= stall_in)) {
            put(top->s_axis_tdata, &beats[i * IW]);
            top->s_axis_tlast = lasts[i] ? 1 : 0;
            offering = true;
        }
        top->s_axis_tvalid = offering;
        const bool ready = stop_at >= 0 || stall_out == 0 || rng.random() >= stall_out;
        top->m_axis_tready = ready;
        top->eval();  // settle: these are the values the design samples at the edge
        const bool took_in = offering && top->s_axis_tready;
        const bool took_out = ready && top->m_axis_tvalid;
        if (stop_at < 0) tap_reader.sample(*top, cycle);
#if defined(HWGEN_WAVE_VCD) || defined(HWGEN_WAVE_FST)
        if (waving) wave->dump(uint64_t(10 * cycle));
#endif
        if (took_out && stop_at < 0) {
            get(top->m_axis_tdata, word);
            out_beats.insert(out_beats.end(), word, word + OW);
            out_last.push_back(top->m_axis_tlast ? 1 : 0);
        }
        top->clk = 1;
        top->eval();
#if defined(HWGEN_WAVE_VCD) || defined(HWGEN_WAVE_FST)
        if (waving) {
            wave->dump(uint64_t(10 * cycle + 5));
            if (took_out && got + 1 >= wave_to) {  // the window's last output beat
                wave->close();
                waving = false;
                waved = true;
            }
        }
#endif
        top->clk = 0;

        if (took_in) {
            in_times.push_back(cycle);
            i++;
            offering = false;
        }
        if (took_out) {
            if (stop_at >= 0) {
                status = 2;  // a beat beyond the expected n_out
                cycle++;
                break;
            }
            out_times.push_back(cycle);
            if (++got == n_out) stop_at = int64_t(cycle + 1 + extra_cycles);
        }
        cycle++;
        if (stop_at >= 0 && int64_t(cycle) >= stop_at) {
            status = 0;
            break;
        }
        if (cycle >= max_cycles && stop_at < 0) break;
    }
#if defined(HWGEN_WAVE_VCD) || defined(HWGEN_WAVE_FST)
    if (waving) wave->close();  // the run ended inside the window (a timeout)
#endif
    top->final();

    // ---- the result (written to RESULT.tmp, renamed when complete)
    std::string tmp = std::string(argv[2]) + ".tmp";
    Writer out(tmp);
    out.raw("HWGR", 4);
    out.val<uint32_t>(FORMAT_VERSION);
    out.val<uint32_t>(status);
    out.val<uint32_t>(uint32_t(OW));
    out.val<uint64_t>(cycle);
    out.val<uint64_t>(in_times.size());
    out.val<uint64_t>(out_times.size());
    out.val<uint64_t>(load_cycles);
    out.raw(in_times.data(), 8 * in_times.size());
    out.raw(out_times.data(), 8 * out_times.size());
    out.raw(out_beats.data(), 4 * out_beats.size());
    out.raw(out_last.data(), out_last.size());
    out.val<uint32_t>(uint32_t(taps.size()));
    for (const Tap& t : taps) {
        out.val<uint64_t>(t.times.size());
        out.raw(t.times.data(), 8 * t.times.size());
        out.raw(t.data.data(), 4 * t.data.size());
    }
    out.close();
    if (std::rename(tmp.c_str(), argv[2]) != 0) die("cannot rename the result");
    return 0;
}
