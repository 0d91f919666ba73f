"""Pipeline registers and the pipelined arithmetic the blocks share.

hwgen's block pipelines never stall (back-pressure only holds their issue stages, see
``credits.py``), so a pipeline stage is a plain register without enable, and a value that
must meet another one later is delayed by as many registers. Every helper here says how many
stages it adds, so the blocks' timing faces can count them.

The rule the helpers follow: between two registers at most one wide carry chain (an adder,
a comparison) with a few LUT levels around it, or one hard multiplier tile (at most
:data:`MUL_CHUNK` × :data:`MUL_CHUNK` bits unsigned: one iCE40 SB_MAC16, one ECP5 MULT18X18D).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Shape, Signal, unsigned

from hwgen.rtl_templates.kept import kept_copy

#: operand chunk of the pipelined wide product: one hard multiplier on both families
MUL_CHUNK = 16
#: adder-tree levels between two registers: one, because two carry chains in a row with the
#: route between them (about 2 ns on ECP5) miss 125 MHz at wide SIMD inside a full design
TREE_LEVELS_PER_STAGE = 1
#: registers in the fabric after a hard multiplier's product (:func:`mul_pipe` with
#: ``valid``): a tile sits wherever the device has one free, and with most of an LFE5U-85F's
#: tiles in use one lands across the die from its logic (7.5 ns of route from a tile at
#: column 96 to its copy at column 18); two copies give that route two periods
FABRIC_COPIES = 2


def reg(m: Module, value, shape, name: str) -> Signal:
    """``value`` registered (one pipeline stage, no enable). A register of more than one bit
    is data (operands, products, sums, requantizer stages) and has no reset: a valid bit
    travels beside it and the reset clears that (one bit: a valid or flag, reset). Data
    registers on the reset net were most of a design's flip-flops, and that net's fan-out
    to every slice crowded place and route."""
    r = Signal(shape, name=name, reset_less=Shape.cast(shape).width > 1)
    m.d.sync += r.eq(value)
    return r


def up_down(m: Module, count: Signal, up, down):
    """The next value of the counter ``count`` that ``up`` adds one to and ``down`` takes one
    from (both: unchanged), chosen among ``count``, ``count + 1`` and ``count - 1``: those
    come from the register alone, so the late ``up`` and ``down`` (handshakes across blocks)
    pass one multiplexer level, not the adder's carry chain."""
    inc = Signal.like(count, name=f"{count.name}_up")
    dec = Signal.like(count, name=f"{count.name}_down")
    m.d.comb += [inc.eq(count + 1), dec.eq(count - 1)]
    return Mux(up, Mux(down, count, inc), Mux(down, dec, count))


def delay(m: Module, sig, n: int, name: str):
    """``sig`` delayed by ``n`` registers."""
    for k in range(n):
        sig = reg(m, sig, sig.shape(), f"{name}_d{k}")
    return sig


def _levels(n: int) -> int:
    return max(0, (n - 1).bit_length())


def tree_stages(n: int) -> int:
    """Registers :func:`tree_sum` puts inside the sum of ``n`` terms (its last levels stay
    combinational: the caller registers the result)."""
    return max(0, -(-_levels(n) // TREE_LEVELS_PER_STAGE) - 1)


def tree_sum(m: Module, terms, name: str):
    """Sum of ``terms`` by a balanced adder tree, with a register after every
    :data:`TREE_LEVELS_PER_STAGE` levels except the last group: a value valid
    :func:`tree_stages` cycles after the terms, to be registered by the caller."""
    terms = list(terms)
    level = 0
    total = _levels(len(terms))
    while len(terms) > 1:
        nxt = [terms[k] + terms[k + 1] for k in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
        level += 1
        if level % TREE_LEVELS_PER_STAGE == 0 and level < total:
            terms = [reg(m, t, t.shape(), f"{name}_l{level}_{k}") for k, t in enumerate(terms)]
    return terms[0]


def tree_sum_registers(n: int, width: int, keep: int = 0) -> int:
    """Flip-flops of :func:`tree_sum`'s inner registers for ``n`` terms of ``width`` bits of
    which only the low ``keep`` bits of the sum are used (0: all): each level's sums are a bit
    wider than its terms; bits above ``keep`` are removed by the tools."""
    total, level, bits, k, w = _levels(n), 0, 0, n, width
    while k > 1:
        k, level, w = (k + 1) // 2, level + 1, w + 1
        if level % TREE_LEVELS_PER_STAGE == 0 and level < total:
            bits += k * (min(w, keep) if keep else w)
    return bits


def tree_sum_groups(n: int, width: int) -> list[tuple[int, int]]:
    """The sums between :func:`tree_sum`'s registers for ``n`` terms of ``width`` bits, as
    (operands, width): the tools turn a sum of several operands into carry-save adders
    (full adders in LUTs) and one carry chain."""
    groups = []
    k, w = n, width
    while k > 1:
        span = 1 << TREE_LEVELS_PER_STAGE
        full, rest = divmod(k, span)
        groups += [(span, w)] * full + ([(rest, w)] if rest > 1 else [])
        k, w = full + (1 if rest else 0), w + TREE_LEVELS_PER_STAGE
    return groups


def rom_counter(m: Module, n: int, step, name: str, copies: int = 1, steps=None
                ) -> tuple[Signal, list[Signal]]:
    """A counter over the ``n`` words of a ROM, advanced (wrapping) when ``step``:
    ``(count, addresses)``. The count is kept as ``copies`` registers of its own (Yosys
    ``keep``; ``count`` is the first), one per read port of the ROM (or of one of its
    slices, :func:`~rtl_templates.memory.lane_rom`): Yosys would otherwise merge the counter
    into the read port and read the ROM through the counter's increment, a carry chain
    before the ROM's logic; each copy also carries its ROM's fan-out alone. The count's next
    value is a register too (``name_ahead``, a step ahead), which each copy loads when
    ``step``: the late step is a copy's enable, the increment and its wrap compare are not
    on its path (cnn_wide's unit: 6 levels from the counter to a copy). ``steps``: a step
    per copy (each equal to ``step`` in every cycle, from a copy of the block's control
    beside that copy's ROM), so no one step's net reaches every copy. Flip-flops:
    :func:`rom_counter_registers`."""
    if n == 1:
        count = Signal(range(2), name=name)
        return count, [count] * copies
    ahead = Signal(range(n), name=f"{name}_ahead", init=1)
    with m.If(step):
        m.d.sync += ahead.eq(Mux(ahead == n - 1, 0, ahead + 1))
    steps = [step] * copies if steps is None else steps
    addresses = [kept_copy(m, ahead, f"{name}_addr{k if k else ''}", reset=True, en=steps[k],
                           shape=range(n)) for k in range(copies)]
    return addresses[0], addresses


def rom_counter_registers(n: int, copies: int) -> int:
    """Flip-flops of :func:`rom_counter`: the ``copies`` addresses and the next value (none
    when ``n`` is 1)."""
    return (copies + 1) * counter_bits(n) if n > 1 else 0


class Loop:
    """A counter over ``0 … n-1`` (``value``) whose ``first`` (== 0) and ``last`` (== n - 1)
    are registers of their own, moving with it: a block's issue conditions start at
    flip-flops, not at its counters' compares (the window generator's row flags and the
    vector unit's input ready ran through them on ResNet-8 and DS-CNN: 9–10.5 ns)."""

    def __init__(self, m: Module, n: int, name: str):
        self.m, self.n = m, n
        self.value = Signal(range(max(n, 2)), name=name)
        self.first = Signal(init=1, name=f"{name}_first")
        self.last = Signal(init=int(n == 1), name=f"{name}_last")

    def step(self, cond) -> None:
        """Advance by one (wrapping to 0 after ``n - 1``) in the cycles where ``cond``."""
        v, last = self.value, self.last
        with self.m.If(cond):
            self.m.d.sync += [v.eq(Mux(last, 0, v + 1)), self.first.eq(last),
                              self.last.eq(Mux(last, self.n == 1, v == self.n - 2))]

    def clear(self) -> None:
        """Back to 0 (in the cycles of the enclosing condition)."""
        self.m.d.sync += [self.value.eq(0), self.first.eq(1), self.last.eq(self.n == 1)]


def counter_bits(n: int) -> int:
    """Bits of ``Signal(range(max(n, 2)))``: a counter over ``n`` values."""
    return max(1, (max(n, 2) - 1).bit_length())


def chunks(width: int) -> int:
    return max(1, -(-width // MUL_CHUNK))


def chunk_widths(width: int) -> list[int]:
    """Widths of the :data:`MUL_CHUNK`-bit chunks of a ``width``-bit operand."""
    return [min(width, (i + 1) * MUL_CHUNK) - i * MUL_CHUNK for i in range(chunks(width))]


def mul_pipe_registers(a_bits: int, b_bits: int, a_regs: bool = True, b_regs: bool = True,
                       copy: bool = False, b_const: int | None = None,
                       b_fixed: bool = False) -> int:
    """Flip-flops of :func:`mul_pipe`: the tiles' operand registers (a chunk's registers are
    the same for every tile it meets, so the tools keep one copy; ``a_regs``/``b_regs``
    False: that operand is another lane's too, or constant, and counted there), the partial
    products (``copy``: and their copies in the fabric, with an enable register per part; the
    enables' valid delay equals the caller's valid chain, which the tools merge it into),
    and the sums of the tree (a sum's low bits are zero below its lowest part).

    ``b_const``: ``b`` is this constant. A partial product by a chunk that is 0 is none; one
    by a chunk with trailing zeros has those bits 0, and its top bits end at the chunk's
    highest one: the tools keep only the bits between. ``b_fixed``: ``b`` is a constant whose
    value is not given. Either way a one-bit chunk of ``a`` times it is that bit wherever the
    constant has a one: the tools keep one flip-flop of each of its registers."""
    w = a_bits + b_bits
    bits = (a_bits if a_regs else 0) + (b_bits if b_regs else 0)
    parts = []                      # (lowest, highest + 1) bit a part can hold
    for i, wa in enumerate(chunk_widths(a_bits)):
        for j, wb in enumerate(chunk_widths(b_bits)):
            lo, live = MUL_CHUNK * (i + j), wa + wb
            if b_const is not None:
                c = (b_const >> (MUL_CHUNK * j)) & ((1 << wb) - 1)
                if c == 0:
                    continue
                tz = (c & -c).bit_length() - 1
                lo, live = lo + tz, wa + (c >> tz).bit_length()
            if min(wa, wb) == 1 and b_const is None:
                live -= 1                   # a one-bit factor: the product fits the other
            kept = 1 if wa == 1 and (b_fixed or b_const is not None) else live
            # (``copy``: and the first copy's enable register)
            bits += kept * (1 + FABRIC_COPIES) + 1 if copy else kept
            parts.append((lo, lo + live))
    if not parts:
        return bits
    while len(parts) > 1:
        nxt = [(min(x[0], y[0]), min(w, max(x[1], y[1]) + 1))
               for x, y in zip(parts[0::2], parts[1::2])]
        bits += sum(hi - lo for lo, hi in nxt)
        if len(parts) % 2:
            nxt.append(parts[-1])
        parts = nxt
    return bits


def fabric_copies(m: Module, product, load_ahead, name: str) -> Signal:
    """A hard multiplier tile's ``product`` register copied :data:`FABRIC_COPIES` times in
    the fabric (``name``, then ``name_1`` …): the tile sits wherever the device has one free,
    and the copies give the route from it to its logic that many periods, so the placer can
    put a copy between them. The first copy loads only when the product is valid, from an
    enable register of its own (``name_en``, ``load_ahead`` registered: high the cycle
    before): a shared enable's net would pull every first copy toward the logic that drives
    it, leaving the whole route to the tile in one period. With that enable Yosys's
    ``ice40_dsp`` takes the copy as the SB_MAC16's output register correctly (a plain
    register behind the product register, which it takes as the pipeline register, it
    replaces by a constant: Yosys 0.70); the others are plain.

    The enable has no reset (a load of a product no valid follows is harmless): a block's
    own valid, delayed as far, is a register of the same next value, and Yosys merges such
    a register into the kept copy (whose loads it then takes on) unless the two differ in
    kind."""
    en = kept_copy(m, load_ahead, f"{name}_en", reset=False)
    first = Signal(unsigned(len(product)), name=name, reset_less=True)
    with m.If(en):
        m.d.sync += first.eq(product)
    r = first
    for c in range(1, FABRIC_COPIES):
        r = reg(m, r, unsigned(len(product)), f"{name}_{c}")
    return r


def mul_stages(a_bits: int, b_bits: int, copy: bool = False) -> int:
    """Registers :func:`mul_pipe` puts between its operands and the product: each tile's
    operands, the partial products (``copy``: and their :data:`FABRIC_COPIES` copies in the
    fabric), then one per level of their sum."""
    return 2 + FABRIC_COPIES * int(copy) + _levels(chunks(a_bits) * chunks(b_bits))


def mul_pipe(m: Module, a, b, name: str, valid=None):
    """The product of the unsigned values ``a`` and ``b`` after :func:`mul_stages` registers:
    each pair of :data:`MUL_CHUNK`-bit chunks multiplied in one hard multiplier tile, with
    operand registers of its own (placed next to the tile) and its product registered; the
    partials summed by a registered tree, one level per stage.

    ``valid`` (high in the cycles ``a`` and ``b`` hold an operand pair; ``copy=True`` in
    :func:`mul_stages`): each partial product is registered :data:`FABRIC_COPIES` times more
    in the fabric. The tile sits wherever the device has one free, often far from the logic
    it feeds (a design using most of an LFE5U-85F's tiles: 7.9 ns of route from a tile's
    output register into the first sum), and the copies give that route clock periods of its
    own (:func:`fabric_copies`)."""
    wa, wb = len(a), len(b)
    if valid is not None:       # the products' valid a cycle ahead (the copies' enables)
        v_ahead = reg(m, valid, 1, f"{name}_va")
    parts = []
    for i in range(chunks(wa)):
        ai = a[i * MUL_CHUNK:min(wa, (i + 1) * MUL_CHUNK)]
        for j in range(chunks(wb)):
            bj = b[j * MUL_CHUNK:min(wb, (j + 1) * MUL_CHUNK)]
            ra = reg(m, ai, unsigned(len(ai)), f"{name}_a{i}_{j}")
            rb = reg(m, bj, unsigned(len(bj)), f"{name}_b{i}_{j}")
            pp = reg(m, ra * rb, unsigned(len(ai) + len(bj)), f"{name}_pp{i}_{j}")
            if valid is not None:
                pp = fabric_copies(m, pp, v_ahead, f"{name}_pd{i}_{j}")
            parts.append(pp << (MUL_CHUNK * (i + j)))
    level = 0
    while len(parts) > 1:
        nxt = [parts[k] + parts[k + 1] for k in range(0, len(parts) - 1, 2)]
        if len(parts) % 2:
            nxt.append(parts[-1])
        parts = [reg(m, t, unsigned(wa + wb), f"{name}_s{level}_{k}") for k, t in enumerate(nxt)]
        level += 1
    return parts[0]


def seq_mul_registers(a_bits: int, b_bits: int, pairs: int, b_regs: bool = True) -> int:
    """Flip-flops of :class:`SeqMul` for ``pairs`` pairs: the ``b`` operands' counter; per
    pair its counter and the counter's delayed copies, the operand latches, the selected
    chunks, the tile's operands, the product and its copy and the accumulator (``b_regs``
    False: the ``b`` latches, selected chunks and tile operands are shared or constant,
    counted once)."""
    n = chunks(a_bits) * chunks(b_bits)
    k = counter_bits(n)
    f = FABRIC_COPIES
    # the counter, its run flag and their delays to each stage (the step valid to the copies)
    control = (4 + f) * k + 7 + f
    a = min(a_bits, MUL_CHUNK)
    b = min(b_bits, MUL_CHUNK)
    # latches, selected chunk and tile operand, product and its copies, the two accumulator
    # halves and their carry, the resolved product
    per = a_bits + 2 * a + (1 + f) * (a + b) + 2 * (a_bits + b_bits) + 1
    bb = b_bits + 2 * b
    return k + 1 + pairs * (control + per) + (pairs * bb if b_regs else bb)


def seq_mul_stages(a_bits: int, b_bits: int) -> int:
    """Cycles from :class:`SeqMul`'s start to its products: one per tile-sized partial
    product, then the selected chunks, the tile's operand, product, the product's
    :data:`FABRIC_COPIES` copies, accumulator and resolved-product registers."""
    return chunks(a_bits) * chunks(b_bits) + 5 + FABRIC_COPIES


def _latched_chunk(m: Module, start, v, k, steps: list[list[int]], name: str):
    """``v`` latched at ``start`` (``name`` with "l"), and the chunk ``c`` of it in the
    steps ``steps[c]`` of counter ``k``, registered (``name`` with "s"; chunk 0 in the
    others)."""
    w = len(v)
    latch = Signal(unsigned(w), name=name.format("l"))
    with m.If(start):
        m.d.sync += latch.eq(v)
    sel = Signal(unsigned(min(w, MUL_CHUNK)), name=name.format("s"))
    with m.Switch(k):
        for c in range(1, len(steps)):
            with m.Case(*steps[c]):
                m.d.sync += sel.eq(latch[c * MUL_CHUNK:min(w, (c + 1) * MUL_CHUNK)])
        with m.Default():
            m.d.sync += sel.eq(latch[:MUL_CHUNK])
    return sel


class SeqMul:
    """Products of unsigned pairs ``(a, b)`` in one hard multiplier tile each, one partial
    product per cycle: for a block whose products are needed at most every
    ``chunks(a)·chunks(b)`` cycles (a requantizer behind many synapse folds), the product of
    a wide pair costs one tile instead of a tile per partial product.

    ``start`` (cycle t) samples every ``a`` and ``b``; :attr:`products` hold them from cycle
    ``t + seq_mul_stages(...)`` for one cycle. Starts must be at least
    ``chunks(a)·chunks(b)`` cycles apart. Each pair has its control (partial-product counter),
    operand latches, tile operand registers, product register and accumulator; the ``b``
    operands' select is one counter for all. The accumulator is two halves with the carry
    between them registered (a step's carry enters the upper half with the next step), so no
    carry chain is longer than half the product; the product is resolved (upper half plus
    the last carry) in a register of its own.

    ``b_rom``: the ``b`` operands are not latched but read chunk by chunk from a ROM, given
    as ``(index, port, early)``: ``index`` (valid at ``start``) selects the operands, and
    word ``index * 2**ceil(log2(chunks(b))) + j`` of the read port ``port`` holds chunk
    ``j`` of every pair's ``b`` (pair ``p`` in bits ``[p*c, (p+1)*c)``, ``c = min(len(b),
    16)``). The index is latched instead of the operands and the read register takes the
    place of the selected chunk's; with ``early`` the ROM is addressed a cycle ahead (from
    the next index and step) and its data registered once more (a block RAM's data leaves
    the tile late: a period of its own). The pairs' ``b`` give only the width."""

    def __init__(self, m: Module, start, pairs, name: str, b_rom=None):
        wa, wb = len(pairs[0][0]), len(pairs[0][1])
        ca, cb = chunks(wa), chunks(wb)
        n = ca * cb

        def counter(suffix: str) -> tuple[Signal, Signal]:
            k = Signal(range(max(n, 2)), name=f"{name}_k{suffix}")
            run = Signal(name=f"{name}_run{suffix}")
            with m.If(start):
                m.d.sync += [k.eq(0), run.eq(1)]
            with m.Elif(run):
                m.d.sync += [k.eq(k + 1), run.eq(k != n - 1)]
            return k, run

        # the ``b`` operands' select: one counter (a ``b`` shared by the pairs, a requantizer's
        # multiplier, is then one register for all their tiles)
        k_b, run_b = counter("b")
        if b_rom is not None:
            index, port, early = b_rom
            idx = Signal.like(index, name=f"{name}_bidx")
            with m.If(start):
                m.d.sync += idx.eq(index)
            kb, ix = k_b, idx
            if early:       # their next values (a step's outside a run is never used)
                kb = Signal.like(k_b, name=f"{name}_kbn")
                m.d.comb += kb.eq(Mux(start, 0, Mux(run_b, k_b + 1, k_b)))
                ix = Mux(start, index, idx)
            j = Signal(range(max(cb, 2)), name=f"{name}_bj")     # the chunk the step selects
            with m.Switch(kb):
                for jj in range(1, cb):
                    with m.Case(*(i * cb + jj for i in range(ca))):
                        m.d.comb += j.eq(jj)
            jbits = (cb - 1).bit_length()
            m.d.comb += port.addr.eq(Cat(j[:jbits], ix) if jbits else ix)
            bw = min(wb, MUL_CHUNK)
            b_data = reg(m, port.data, len(port.data), f"{name}_bd") if early else port.data
        self.products = []
        for p, (a, b) in enumerate(pairs):
            # the rest of the control, one copy per pair: its selects drive every bit of the
            # pair's multiplexers, and one copy for all pairs spreads that fan-out over the die
            k, run = counter(str(p))
            # stage X: this cycle's chunks; X2: the tile's operands; Y: their product; Z:
            # shifted in place; then accumulate
            first_x = reg(m, run & (k == 0), unsigned(1), f"{name}_fx{p}")
            k_x = delay(m, k, 2, f"{name}_kx{p}")
            first_y = delay(m, first_x, 2, f"{name}_fy{p}")
            # stages C: the product's copies in the fabric, then the accumulator (Z)
            first_z = delay(m, first_y, FABRIC_COPIES, f"{name}_fz{p}")
            k_y = reg(m, k_x, k.shape(), f"{name}_ky{p}")
            k_c = delay(m, k_y, FABRIC_COPIES, f"{name}_kc{p}")
            run_ahead = delay(m, run, 2, f"{name}_ry{p}")     # stage Y's run, a cycle ahead
            # this step's chunks (stage X): outside a run the select picks some chunks, whose
            # products are never read
            sel_a = _latched_chunk(m, start, a, k, [[i * cb + j for j in range(cb)]
                                                    for i in range(ca)], f"{name}_{{}}a{p}")
            if b_rom is not None:           # the read register holds this step's chunk
                sel_b = b_data[p * bw:(p + 1) * bw]
            else:
                sel_b = _latched_chunk(m, start, b, k_b, [[i * cb + j for i in range(ca)]
                                                          for j in range(cb)],
                                       f"{name}_{{}}b{p}")
            # the tile's operand registers (stage X2): plain copies, no enable, no reset, so
            # that they move into the tile (boards/dsp_pack.py); the selects' registers above
            # take resets of their own per bit (a narrower chunk's zeros)
            opa = Signal.like(sel_a, name=f"{name}_opa{p}", reset_less=True)
            opb = Signal.like(sel_b, name=f"{name}_opb{p}", reset_less=True)
            m.d.sync += [opa.eq(sel_a), opb.eq(sel_b)]
            pp = reg(m, opa * opb, unsigned(len(opa) + len(opb)), f"{name}_pp{p}")
            # the product register is the tile's (boards/dsp_pack.py), and the tile sits
            # wherever one is free: copies in the fabric give that route periods of their own
            # (ResNet-8's stem requantizer: 10.3 ns from a tile across the die with none,
            # 8.5 ns from the tile to a single copy placed beside its accumulator)
            pp = fabric_copies(m, pp, run_ahead, f"{name}_pc{p}")
            acc = Signal(unsigned(wa + wb), name=f"{name}_acc{p}", reset_less=True)
            # the partial product in place: the last copy's bits selected into the
            # accumulator's carry chains (a LUT level before them; the copies are the plain
            # registers the tile's route needs, so the shift takes no register of its own)
            shifted = Signal(unsigned(wa + wb), name=f"{name}_sh{p}")
            with m.Switch(k_c):
                for i in range(ca):
                    for j in range(cb):
                        with m.Case(i * cb + j):
                            m.d.comb += shifted.eq(pp << (MUL_CHUNK * (i + j)))
            # accumulate: lower half with its carry out registered, upper half with the
            # previous step's carry (none on a product's first step)
            w = wa + wb
            h = (w + 1) // 2
            lo = Signal(unsigned(h), name=f"{name}_lo{p}", reset_less=True)
            hi = Signal(unsigned(w - h), name=f"{name}_hi{p}", reset_less=True)
            cy = Signal(name=f"{name}_cy{p}")
            lo_sum = Mux(first_z, 0, lo) + shifted[:h]
            # hi + shifted + carry as one carry chain: (carry:hi) + (carry:shifted), LSB dropped
            c_in = cy & ~first_z
            hi_sum = Cat(c_in, Mux(first_z, 0, hi)) + Cat(c_in, shifted[h:])
            m.d.sync += [lo.eq(lo_sum[:h]), cy.eq(lo_sum[h]), hi.eq(hi_sum[1:w - h + 1])]
            m.d.sync += acc.eq(Cat(lo, hi + cy))
            self.products.append(acc)
