// A behavioural model of the ECP5 MULT18X18D in the modes hwgen's netlists use: an 18x18
// product (signed per SIGNEDA/SIGNEDB), inputs A and B and output P each either
// combinational or registered on CLK0 (clock enable and synchronous reset to 0 chosen by
// REG_*_CE / REG_*_RST). Used by the tests to check the DSP register packing by SAT.
module MULT18X18D(
    input A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15, A16, A17,
    input B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15, B16, B17,
    input C0, C1, C2, C3, C4, C5, C6, C7, C8, C9, C10, C11, C12, C13, C14, C15, C16, C17,
    input SIGNEDA, SIGNEDB, SOURCEA, SOURCEB,
    input CLK0, CLK1, CLK2, CLK3, CE0, CE1, CE2, CE3, RST0, RST1, RST2, RST3,
    output P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, P12, P13, P14, P15, P16, P17,
    output P18, P19, P20, P21, P22, P23, P24, P25, P26, P27, P28, P29, P30, P31, P32, P33,
    output P34, P35
);
    parameter REG_INPUTA_CLK = "NONE";
    parameter REG_INPUTA_CE = "CE0";
    parameter REG_INPUTA_RST = "RST0";
    parameter REG_INPUTB_CLK = "NONE";
    parameter REG_INPUTB_CE = "CE0";
    parameter REG_INPUTB_RST = "RST0";
    parameter REG_OUTPUT_CLK = "NONE";
    parameter REG_OUTPUT_CE = "CE0";
    parameter REG_OUTPUT_RST = "RST0";
    parameter RESETMODE = "SYNC";

    wire [17:0] a = {A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0};
    wire [17:0] b = {B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0};
    wire [3:0] ce = {CE3, CE2, CE1, CE0};
    wire [3:0] rst = {RST3, RST2, RST1, RST0};
    wire ce_a = ce[REG_INPUTA_CE == "CE0" ? 0 : REG_INPUTA_CE == "CE1" ? 1 : REG_INPUTA_CE == "CE2" ? 2 : 3];
    wire ce_b = ce[REG_INPUTB_CE == "CE0" ? 0 : REG_INPUTB_CE == "CE1" ? 1 : REG_INPUTB_CE == "CE2" ? 2 : 3];
    wire ce_p = ce[REG_OUTPUT_CE == "CE0" ? 0 : REG_OUTPUT_CE == "CE1" ? 1 : REG_OUTPUT_CE == "CE2" ? 2 : 3];
    wire rs_a = rst[REG_INPUTA_RST == "RST0" ? 0 : REG_INPUTA_RST == "RST1" ? 1 : REG_INPUTA_RST == "RST2" ? 2 : 3];
    wire rs_b = rst[REG_INPUTB_RST == "RST0" ? 0 : REG_INPUTB_RST == "RST1" ? 1 : REG_INPUTB_RST == "RST2" ? 2 : 3];
    wire rs_p = rst[REG_OUTPUT_RST == "RST0" ? 0 : REG_OUTPUT_RST == "RST1" ? 1 : REG_OUTPUT_RST == "RST2" ? 2 : 3];

    reg [17:0] a_r = 0, b_r = 0;
    reg sa_r = 0, sb_r = 0;
    reg [35:0] p_r = 0;
    always @(posedge CLK0) begin
        if (rs_a) begin a_r <= 0; sa_r <= 0; end else if (ce_a) begin a_r <= a; sa_r <= SIGNEDA; end
        if (rs_b) begin b_r <= 0; sb_r <= 0; end else if (ce_b) begin b_r <= b; sb_r <= SIGNEDB; end
    end
    wire [17:0] a_m = REG_INPUTA_CLK == "NONE" ? a : a_r;
    wire [17:0] b_m = REG_INPUTB_CLK == "NONE" ? b : b_r;
    wire sa = REG_INPUTA_CLK == "NONE" ? SIGNEDA : sa_r;
    wire sb = REG_INPUTB_CLK == "NONE" ? SIGNEDB : sb_r;
    wire [35:0] ax = {{18{sa & a_m[17]}}, a_m};
    wire [35:0] bx = {{18{sb & b_m[17]}}, b_m};
    wire [35:0] prod = ax * bx;
    always @(posedge CLK0)
        if (rs_p) p_r <= 0; else if (ce_p) p_r <= prod;
    wire [35:0] p = REG_OUTPUT_CLK == "NONE" ? prod : p_r;
    assign {P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20, P19, P18,
            P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0} = p;
endmodule
