/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gloo_coll_bench.cc -- a Gloo allreduce sweep (float32 sum) for comparing with cohort.
 *
 * Each rank is its own process, started by the caller with RANK and WORLD_SIZE in the
 * environment; the ranks meet through a gloo::rendezvous::FileStore in the directory given with
 * --store (empty, shared by the ranks of one run, a fresh one per run) and talk over Gloo's tcp
 * transport (--host, default 127.0.0.1).
 *
 * Algorithms (-a): ring   gloo::AllreduceRing (default), in place on one buffer
 *                  hd     gloo::AllreduceHalvingDoubling, in place on one buffer
 *                  new    gloo::allreduce() (AllreduceOptions, RING), out of place; the calls
 *                         move through 32 MiB of buffers unless --same-buffer
 * The algorithm objects of ring and hd bind their buffer when built, so they always run on
 * the same buffer (as Gloo's own benchmark does).
 *
 * Per size: one call checked element by element on every rank (exit status 1 on a wrong
 * element), warm-up calls, then the timed calls in up to 5 rounds; time = median over the
 * rounds of the maximum over ranks of the round's per-call time, as cohort-bench. Rank 0 prints
 * nccl-tests-like columns and one line per size
 *   RESULT,<label>,<np>,allreduce,<bytes>,<iters>,<time_us>,<min_us>,<algbw_GBs>,<busbw_GBs>,ok
 * with busbw = algbw * 2(n-1)/n.
 *
 * Build: g++ -O2 -std=c++17 -Wall -Wextra -Werror gloo_coll_bench.cc -lgloo -lpthread
 */
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int kMaxRounds = 5;
constexpr size_t kPoolBytes = size_t(32) << 20;

struct Opts {
    size_t minbytes = 8, maxbytes = size_t(64) << 20;
    long factor = 2;
    int iters = 20, warmup = 5, timeout_s = 120;
    bool same_buffer = false;
    std::string algo = "ring", store, host = "127.0.0.1", label;
};

void usage(FILE *f, const char *prog)
{
    std::fprintf(f,
        "usage: RANK=r WORLD_SIZE=n %s --store DIR [options]   (one process per rank)\n"
        "  --store DIR            FileStore directory shared by the ranks (required; empty)\n"
        "  --host H               address of the tcp transport (default 127.0.0.1)\n"
        "  -a, --algo A           ring (AllreduceRing, default) | hd (AllreduceHalvingDoubling)\n"
        "                         | new (gloo::allreduce, ring)\n"
        "  -b, --minbytes SIZE    smallest size, K/M/G suffixes (default 8)\n"
        "  -e, --maxbytes SIZE    largest size (default 64M)\n"
        "  -f, --stepfactor N     multiply the size by N (default 2)\n"
        "  -n, --iters N          timed calls per size (default 20)\n"
        "  -w, --warmup N         untimed calls before them (default 5)\n"
        "      --same-buffer      -a new: every call on the same buffers (ring and hd always are)\n"
        "      --timeout S        Gloo's timeout for rendezvous and calls, seconds (default 120)\n"
        "  -l, --label L          label of the RESULT lines (default gloo, gloo-hd, gloo-new)\n"
        "  -h, --help             this text\n"
        "Exit status 1 if an element was wrong or Gloo failed, 2 on bad usage.\n",
        prog);
}

bool parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (end == s || errno)
        return false;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > (SIZE_MAX >> shift))
        return false;
    *out = size_t(v) << shift;
    return true;
}

bool parse_int(const char *s, int min, int *out)
{
    char *end;
    errno = 0;
    long v = std::strtol(s, &end, 10);
    if (end == s || *end || errno || v < min || v > 1000000000L)
        return false;
    *out = int(v);
    return true;
}

bool env_int(const char *name, int *out)
{
    const char *s = std::getenv(name);
    return s && parse_int(s, 0, out);
}

float val_reduce(int r, size_t i) { return float((r + 1) * int(i % 7 + 1)); }

double now_us()
{
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

/* One allreduce of count floats: in place on buf (ring, hd) or buf -> out (new). */
class Call {
public:
    Call(const std::shared_ptr<gloo::Context> &ctx, const std::string &algo, float *in,
         size_t count)
        : ctx_(ctx), algo_(algo), count_(count)
    {
        if (algo == "ring")
            alg_.reset(new gloo::AllreduceRing<float>(ctx, { in }, int(count)));
        else if (algo == "hd")
            alg_.reset(new gloo::AllreduceHalvingDoubling<float>(ctx, { in }, int(count)));
    }
    void run(float *in, float *out)
    {
        if (alg_) {
            alg_->run();
            return;
        }
        gloo::AllreduceOptions o(ctx_);
        o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        o.setInput(in, count_);
        o.setOutput(out, count_);
        o.setReduceFunction(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
        gloo::allreduce(o);
    }

private:
    std::shared_ptr<gloo::Context> ctx_;
    std::string algo_;
    size_t count_;
    std::unique_ptr<gloo::Algorithm> alg_;
};

template <typename T> void all_reduce_small(const std::shared_ptr<gloo::Context> &ctx, T *v, int n,
                                            const gloo::ReductionFunction<T> *fn)
{
    gloo::AllreduceRing<T> a(ctx, { v }, n, fn);
    a.run();
}

int bench(const Opts &o, int rank, int size)
{
    gloo::transport::tcp::attr attr;
    attr.hostname = o.host;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore fstore(o.store);
    gloo::rendezvous::PrefixStore store("gloo_coll_bench", fstore);
    auto rctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    rctx->setTimeout(std::chrono::milliseconds(int64_t(o.timeout_s) * 1000));
    rctx->connectFullMesh(store, dev);
    std::shared_ptr<gloo::Context> ctx = rctx;

    bool inplace = o.algo != "new";
    size_t maxcount = std::max<size_t>(o.maxbytes / sizeof(float), 1);
    size_t parts = 1;
    if (!inplace && !o.same_buffer && maxcount * sizeof(float) < kPoolBytes)
        parts = kPoolBytes / (maxcount * sizeof(float));
    std::vector<float> in(maxcount * parts, 1.0f), out(inplace ? 0 : maxcount * parts, 0.0f);
    std::string label = !o.label.empty() ? o.label : o.algo == "ring" ? "gloo" : "gloo-" + o.algo;

    if (rank == 0) {
        std::printf("# Gloo (libgloo, tcp transport on %s, FileStore rendezvous)\n"
                    "# gloo_coll_bench: allreduce (%s) float32 sum, np %d, %d iters (%d warm-up), "
                    "%s\n#\n# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s\n",
                    o.host.c_str(), o.algo.c_str(), size, o.iters, o.warmup,
                    inplace ? "in place, same buffer"
                            : o.same_buffer ? "out of place, same buffers"
                                            : "out of place, moving through the buffers",
                    "size", "count", "type", "redop", "root", "time(us)", "algbw", "busbw",
                    "#wrong");
        std::fflush(stdout);
    }

    int nrounds = std::min(o.iters, kMaxRounds);
    for (size_t bytes = o.minbytes; bytes <= o.maxbytes;) {
        size_t count = bytes / sizeof(float);
        if (count == 0) {
            if (rank == 0)
                std::printf("# %zu bytes: less than one float32, skipped\n", bytes);
        } else {
            size_t steps = inplace ? 1 : parts * maxcount / count;
            if (o.same_buffer || steps < 1)
                steps = 1;
            float *ob = inplace ? nullptr : out.data();
            Call call(ctx, o.algo, in.data(), count);

            /* check one call */
            for (size_t i = 0; i < count; i++)
                in[i] = val_reduce(rank, i);
            call.run(in.data(), ob);
            const float *res = inplace ? in.data() : ob;
            float tri = float(size * (size + 1) / 2);
            double wrong = 0;
            for (size_t i = 0; i < count; i++)
                wrong += res[i] != float(int(i % 7 + 1)) * tri;
            double allwrong = wrong;
            all_reduce_small<double>(ctx, &allwrong, 1, gloo::ReductionFunction<double>::sum);
            if (allwrong != 0) {
                if (rank == 0)
                    std::fprintf(stderr, "gloo_coll_bench: allreduce of %zu bytes: %.0f wrong "
                                         "elements\n", count * sizeof(float), allwrong);
                return 1;
            }
            /* in place, the sums would grow without bound: time on zeros, or ones */
            std::fill(in.begin(), in.begin() + long(count), inplace ? 0.0f : 1.0f);

            size_t it = 0;
            for (int w = 0; w < o.warmup; w++, it++)
                call.run(in.data() + (it % steps) * count,
                         inplace ? nullptr : ob + (it % steps) * count);
            gloo::BarrierAllToAll(ctx).run();
            double rounds[kMaxRounds];
            int done = 0;
            for (int rd = 0; rd < nrounds; rd++) {
                int end = int((long long)o.iters * (rd + 1) / nrounds), k = end - done;
                double t0 = now_us();
                for (int j = 0; j < k; j++, it++)
                    call.run(in.data() + (it % steps) * count,
                             inplace ? nullptr : ob + (it % steps) * count);
                rounds[rd] = (now_us() - t0) / k;
                done = end;
            }
            all_reduce_small<double>(ctx, rounds, nrounds, gloo::ReductionFunction<double>::max);
            if (rank == 0) {
                for (int a = 1; a < nrounds; a++) /* insertion sort (std::sort trips -Warray-bounds) */
                    for (int b = a; b > 0 && rounds[b] < rounds[b - 1]; b--)
                        std::swap(rounds[b], rounds[b - 1]);
                double med = nrounds % 2 ? rounds[nrounds / 2]
                                         : 0.5 * (rounds[nrounds / 2 - 1] + rounds[nrounds / 2]);
                size_t nb = count * sizeof(float);
                double algbw = double(nb) / (med * 1e-6) / 1e9;
                double busbw = algbw * 2.0 * (size - 1) / size;
                std::printf("  %10zu  %12zu  %8s  %6s  %6d  %9.2f  %7.2f  %7.2f  %6d\n", nb, count,
                            "float", "sum", -1, med, algbw, busbw, 0);
                std::printf("RESULT,%s,%d,allreduce,%zu,%d,%.3f,%.3f,%.4f,%.4f,ok\n",
                            label.c_str(), size, nb, o.iters, med, rounds[0], algbw, busbw);
                std::fflush(stdout);
            }
        }
        if (bytes > o.maxbytes / size_t(o.factor))
            break;
        bytes *= size_t(o.factor);
    }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    Opts o;
    enum { OPT_STORE = 256, OPT_HOST, OPT_SAME, OPT_TIMEOUT };
    static const struct option lopts[] = {
        { "store", required_argument, 0, OPT_STORE },  { "host", required_argument, 0, OPT_HOST },
        { "algo", required_argument, 0, 'a' },         { "minbytes", required_argument, 0, 'b' },
        { "maxbytes", required_argument, 0, 'e' },     { "stepfactor", required_argument, 0, 'f' },
        { "iters", required_argument, 0, 'n' },        { "warmup", required_argument, 0, 'w' },
        { "warmup_iters", required_argument, 0, 'w' }, { "same-buffer", no_argument, 0, OPT_SAME },
        { "timeout", required_argument, 0, OPT_TIMEOUT }, { "label", required_argument, 0, 'l' },
        { "result-label", required_argument, 0, 'l' }, { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 }
    };
    int ch, factor = 2;
    bool ok = true;
    while (ok && (ch = getopt_long(argc, argv, "a:b:e:f:n:w:l:h", lopts, nullptr)) != -1) {
        switch (ch) {
        case OPT_STORE: o.store = optarg; break;
        case OPT_HOST: o.host = optarg; break;
        case 'a': o.algo = optarg; ok = o.algo == "ring" || o.algo == "hd" || o.algo == "new"; break;
        case 'b': ok = parse_size(optarg, &o.minbytes); break;
        case 'e': ok = parse_size(optarg, &o.maxbytes); break;
        case 'f': ok = parse_int(optarg, 2, &factor); o.factor = factor; break;
        case 'n': ok = parse_int(optarg, 1, &o.iters); break;
        case 'w': ok = parse_int(optarg, 0, &o.warmup); break;
        case OPT_SAME: o.same_buffer = true; break;
        case OPT_TIMEOUT: ok = parse_int(optarg, 1, &o.timeout_s); break;
        case 'l': o.label = optarg; break;
        case 'h': usage(stdout, argv[0]); return 0;
        default: ok = false; break;
        }
        if (!ok && ch != '?')
            std::fprintf(stderr, "%s: bad value: %s\n", argv[0], optarg ? optarg : "");
    }
    int rank = -1, size = -1;
    if (ok && (optind < argc || o.store.empty() || o.minbytes == 0 || o.minbytes > o.maxbytes)) {
        std::fprintf(stderr, "%s: need --store DIR, 0 < minbytes <= maxbytes, no operands\n",
                     argv[0]);
        ok = false;
    }
    if (ok && (!env_int("RANK", &rank) || !env_int("WORLD_SIZE", &size) || size < 1 ||
               rank >= size)) {
        std::fprintf(stderr, "%s: set RANK and WORLD_SIZE (0 <= RANK < WORLD_SIZE)\n", argv[0]);
        ok = false;
    }
    if (!ok) {
        usage(stderr, argv[0]);
        return 2;
    }
    try {
        return bench(o, rank, size);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "gloo_coll_bench: rank %d: %s\n", rank, e.what());
        return 1;
    }
}
