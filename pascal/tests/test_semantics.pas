{ test_semantics — the RTL's memory-manager contract under ShoalMM:
  GetMem(0), AllocMem zeroing, ReAllocMem's nil and 0 cases and content,
  MemSize, FreeMemSize's size rules, 16-byte alignment, pointers of the
  previous manager, heap status and out of memory.

  Run with the argument "oom" it must die with run-time error 203. }
program test_semantics;

{$mode objfpc}{$H+}

uses
  ShoalMM, {$ifdef unix} cthreads, BaseUnix, {$endif} SysUtils;

{$i check.inc}

const
  { Beyond any x86-64 address space: no mapping can succeed. }
  Impossible = PtrUInt(1) shl 62;

function AllBytes(p: PByte; Count: PtrUInt; Value: Byte): Boolean;
var
  i: PtrUInt;
begin
  Result := True;
  for i := 0 to Count - 1 do
    if p[i] <> Value then
      exit(False);
end;

function Pattern(i: PtrUInt): Byte; inline;
begin
  Result := Byte(i * 7 + 3);
end;

procedure FillPattern(p: PByte; Count: PtrUInt);
var
  i: PtrUInt;
begin
  for i := 0 to Count - 1 do
    p[i] := Pattern(i);
end;

function HasPattern(p: PByte; Count: PtrUInt): Boolean;
var
  i: PtrUInt;
begin
  Result := True;
  for i := 0 to Count - 1 do
    if p[i] <> Pattern(i) then
      exit(False);
end;

procedure TestGetMemZero;
var
  a, b: Pointer;
begin
  a := GetMem(0);
  b := GetMem(0);
  Check(a <> nil, 'GetMem(0) returned nil');
  Check(b <> nil, 'second GetMem(0) returned nil');
  Check(a <> b, 'two GetMem(0) blocks are the same pointer');
  Check(ShoalOwns(a), 'GetMem(0) block is not shoal''s');
  FreeMem(a);
  FreeMem(b);
end;

procedure TestSizesAndAlignment;
const
  Sizes: array[0..22] of PtrUInt = (1, 7, 8, 15, 16, 17, 24, 100, 128, 129, 1000, 2560,
    4096, 10000, 65535, 65536, 65537, 100000, 1 shl 20, 2 shl 20, (2 shl 20) + 1, 5 shl 20,
    33 shl 20);
var
  i: Integer;
  p: Pointer;
  Size: PtrUInt;
begin
  for i := Low(Sizes) to High(Sizes) do
  begin
    Size := Sizes[i];
    p := GetMem(Size);
    Check(p <> nil, Format('GetMem(%d) returned nil', [Size]));
    Check(PtrUInt(p) and 15 = 0, Format('GetMem(%d) = %p is not 16-byte aligned', [Size, p]));
    Check(MemSize(p) >= Size, Format('MemSize of GetMem(%d) is %d', [Size, MemSize(p)]));
    FillChar(p^, MemSize(p), $5A);  { the whole usable size is writable }
    FreeMem(p);
  end;
  for Size := 1 to 3000 do
  begin
    p := GetMem(Size);
    Check(PtrUInt(p) and 15 = 0, Format('GetMem(%d) = %p is not 16-byte aligned', [Size, p]));
    Check(MemSize(p) >= Size, Format('MemSize of GetMem(%d) is %d', [Size, MemSize(p)]));
    FreeMem(p);
  end;
  Check(MemSize(nil) = 0, 'MemSize(nil) is not 0');
end;

procedure TestAllocMem;
const
  Sizes: array[0..6] of PtrUInt = (1, 24, 333, 4000, 70000, 3 shl 20, 9 shl 20);
var
  i: Integer;
  p: Pointer;
begin
  { Dirty some memory first so a recycled block would show. }
  for i := 1 to 100 do
  begin
    p := GetMem(333);
    FillChar(p^, 333, $FF);
    FreeMem(p);
  end;
  for i := Low(Sizes) to High(Sizes) do
  begin
    p := AllocMem(Sizes[i]);
    Check(p <> nil, Format('AllocMem(%d) returned nil', [Sizes[i]]));
    Check(AllBytes(p, Sizes[i], 0), Format('AllocMem(%d) is not zeroed', [Sizes[i]]));
    FillChar(p^, Sizes[i], $FF);
    FreeMem(p);
    p := AllocMem(Sizes[i]);
    Check(AllBytes(p, Sizes[i], 0), Format('AllocMem(%d) after a dirty free is not zeroed', [Sizes[i]]));
    FreeMem(p);
  end;
  p := AllocMem(0);
  Check(p <> nil, 'AllocMem(0) returned nil');
  FreeMem(p);
end;

procedure TestReAllocMem;
const
  Steps: array[0..11] of PtrUInt = (1, 10, 100, 50, 3000, 70000, 20, 3 shl 20, 5 shl 20, 100, 12 shl 20, 8);
var
  p, q, r: Pointer;
  i: Integer;
  Kept: PtrUInt;
begin
  p := nil;
  r := ReAllocMem(p, 64);
  Check(p <> nil, 'ReAllocMem(nil, 64) did not allocate');
  Check(r = p, 'ReAllocMem(nil, 64) result differs from p');
  Check(ShoalOwns(p), 'ReAllocMem(nil, 64) block is not shoal''s');
  r := ReAllocMem(p, 0);
  Check(p = nil, 'ReAllocMem(p, 0) did not set p to nil');
  Check(r = nil, 'ReAllocMem(p, 0) did not return nil');
  r := ReAllocMem(p, 0);
  Check((p = nil) and (r = nil), 'ReAllocMem(nil, 0) is not a no-op');

  { Content survives every grow and shrink, across size classes, large and huge. }
  p := GetMem(Steps[0]);
  FillPattern(p, Steps[0]);
  Kept := Steps[0];
  for i := 1 to High(Steps) do
  begin
    q := ReAllocMem(p, Steps[i]);
    Check(q = p, 'ReAllocMem result differs from the updated p');
    Check(PtrUInt(p) and 15 = 0, Format('ReAllocMem to %d is not 16-byte aligned', [Steps[i]]));
    if Steps[i] < Kept then
      Kept := Steps[i];
    Check(HasPattern(p, Kept), Format('ReAllocMem to %d lost the content', [Steps[i]]));
    Check(MemSize(p) >= Steps[i], Format('MemSize after ReAllocMem to %d is %d', [Steps[i], MemSize(p)]));
    FillPattern(p, Steps[i]);
    Kept := Steps[i];
  end;
  FreeMem(p);

  { Appending one byte at a time, as string building does. }
  p := nil;
  for i := 1 to 100000 do
  begin
    ReAllocMem(p, i);
    PByte(p)[i - 1] := Pattern(i - 1);
  end;
  Check(HasPattern(p, 100000), 'byte-at-a-time ReAllocMem lost the content');
  FreeMem(p);
end;

procedure TestFreeMemSize;
var
  p: Pointer;
  Before: TShoalStats;
  Current: TMemoryManager;
begin
  GetMemoryManager(Current);
  Check(Current.FreeMemSize(nil, 10) = 0, 'FreeMemSize(nil, 10) is not 0');
  p := GetMem(40);
  FillChar(p^, 40, 1);
  Before := ShoalStats;
  { Size 0: the RTL frees nothing. }
  Check(Current.FreeMemSize(p, 0) = 0, 'FreeMemSize(p, 0) did not return 0');
  FreeMem(p, 0);
  Check(ShoalStats.LiveBlocks = Before.LiveBlocks, 'FreeMemSize(p, 0) freed the block');
  Check(AllBytes(p, 40, 1), 'FreeMemSize(p, 0) touched the block');
  { The right size frees. }
  FreeMem(p, 40);
  Check(ShoalStats.LiveBlocks = Before.LiveBlocks - 1, 'FreeMem(p, 40) did not free the block');
  { A wrong size: the default heap disregards it and frees the block. }
  p := GetMem(40);
  Before := ShoalStats;
  FreeMem(p, 13);
  Check(ShoalStats.LiveBlocks = Before.LiveBlocks - 1, 'FreeMem(p, wrong size) did not free the block');
  { Freemem returns the freed size. }
  p := GetMem(100);
  Check(FreeMem(p) >= 100, 'FreeMem(p) did not return the freed size');
  Check(FreeMem(nil) = 0, 'FreeMem(nil) is not 0');
end;

procedure TestForeignBlocks;
var
  Previous: TMemoryManager;
  p, q: Pointer;
  i: Integer;
begin
  ShoalPreviousManager(Previous);
  Check(Previous.GetMem <> nil, 'no previous manager saved');
  { FreeMem }
  p := Previous.GetMem(100);
  Check(not ShoalOwns(p), 'a block of the previous manager is shoal''s');
  FreeMem(p);
  { MemSize }
  p := Previous.GetMem(100);
  Check(MemSize(p) = Previous.MemSize(p), 'MemSize of a foreign block differs from its manager''s');
  { FreeMemSize }
  FreeMem(p, 100);
  { ReAllocMem moves it into shoal, content kept, both ways. }
  for i := 0 to 1 do
  begin
    p := Previous.GetMem(200);
    FillPattern(p, 200);
    q := p;
    if i = 0 then
      ReAllocMem(p, 5000)
    else
      ReAllocMem(p, 50);
    Check(ShoalOwns(p), 'ReAllocMem of a foreign block did not move it into shoal');
    Check(p <> q, 'ReAllocMem of a foreign block kept the foreign pointer');
    if i = 0 then
      Check(HasPattern(p, 200), 'ReAllocMem of a foreign block (grow) lost the content')
    else
      Check(HasPattern(p, 50), 'ReAllocMem of a foreign block (shrink) lost the content');
    FreeMem(p);
  end;
  { ReAllocMem(foreign, 0) frees it through its manager. }
  p := Previous.GetMem(64);
  ReAllocMem(p, 0);
  Check(p = nil, 'ReAllocMem(foreign, 0) did not set p to nil');
end;

procedure TestHeapStatus;
var
  F1, F2: TFPCHeapStatus;
  H: THeapStatus;
  p: Pointer;
begin
  F1 := GetFPCHeapStatus;
  Check(F1.CurrHeapUsed > 0, 'GetFPCHeapStatus.CurrHeapUsed is 0');
  Check(F1.CurrHeapSize >= F1.CurrHeapUsed, 'CurrHeapSize < CurrHeapUsed');
  p := GetMem(10 shl 20);
  FillChar(p^, 10 shl 20, 1);
  F2 := GetFPCHeapStatus;
  Check(F2.CurrHeapUsed >= F1.CurrHeapUsed + (10 shl 20), 'CurrHeapUsed did not grow by 10 MiB');
  Check(F2.CurrHeapSize >= F2.CurrHeapUsed, 'CurrHeapSize < CurrHeapUsed after 10 MiB');
  Check(F2.MaxHeapUsed >= F2.CurrHeapUsed, 'MaxHeapUsed < CurrHeapUsed');
  Check(F2.MaxHeapSize >= F2.CurrHeapSize, 'MaxHeapSize < CurrHeapSize');
  H := GetHeapStatus;
  Check(H.TotalAllocated >= 10 shl 20, 'GetHeapStatus.TotalAllocated < 10 MiB');
  Check(H.TotalAddrSpace >= H.TotalCommitted, 'TotalAddrSpace < TotalCommitted');
  FreeMem(p);
  F1 := GetFPCHeapStatus;
  Check(F1.CurrHeapUsed + (10 shl 20) <= F2.CurrHeapUsed, 'CurrHeapUsed did not fall after freeing 10 MiB');
  Check(F1.MaxHeapUsed >= F2.CurrHeapUsed, 'MaxHeapUsed fell');
end;

procedure TestOutOfMemoryNil;
var
  p, q: Pointer;
begin
  ReturnNilIfGrowHeapFails := True;
  Check(GetMem(Impossible) = nil, 'GetMem(2^62) did not return nil');
  Check(AllocMem(Impossible) = nil, 'AllocMem(2^62) did not return nil');
  p := GetMem(100);
  q := ReAllocMem(p, Impossible);
  Check((q = nil) and (p = nil), 'ReAllocMem(p, 2^62) did not return nil and set p to nil');
  ReturnNilIfGrowHeapFails := False;
end;

procedure TestOutOfMemoryException;
var
  Raised: Boolean;
begin
  Raised := False;
  try
    GetMem(Impossible);
  except
    on EOutOfMemory do
      Raised := True;
  end;
  Check(Raised, 'GetMem(2^62) did not raise EOutOfMemory');
end;

procedure TestOutOfMemoryRunError;
var
  Code: LongInt;
begin
  Code := ExecuteProcess(ParamStr(0), 'oom');
  Check(Code = 203, Format('GetMem(2^62) without SysUtils exceptions exited %d, not 203', [Code]));
end;

{ Kept out of the main block, whose string temporaries would put an
  exception frame around the run-time error. }
function IsOutOfMemoryChild: Boolean;
begin
  Result := ParamStr(1) = 'oom';
end;

procedure Main;
begin
  Check(ShoalActive, 'ShoalMM did not install itself');
  TestGetMemZero;
  TestSizesAndAlignment;
  TestAllocMem;
  TestReAllocMem;
  TestFreeMemSize;
  TestForeignBlocks;
  TestHeapStatus;
  TestOutOfMemoryNil;
  TestOutOfMemoryException;
  TestOutOfMemoryRunError;
  Writeln('ok ', ChecksRun, ' checks');
end;

begin
  if IsOutOfMemoryChild then
  begin
    ErrorProc := nil;  { no SysUtils exception: the plain run-time error }
    {$ifdef unix}
    fpDup2(fpOpen('/dev/null', O_WRONLY), 2);  { keep its message out of the log }
    {$endif}
    GetMem(Impossible);
    Halt(0);
  end;
  Main;
end.
